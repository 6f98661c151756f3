"""The momentum-approximation study redone for review (issue 28; docs/ma-review.md), a script on
the library's experiment engine and on the old study's scenario builder
(:mod:`analysis.ma_study`): ``python -m analysis.ma_review SPEC --out DIR`` runs it,
``python -m analysis.ma_review report --out DIR`` recomputes the report and the figures from the
folder's CSVs alone. The committed results are ``analysis/results/ma_review/``.

Modules, each importing only those above it (no cycle):

============  ===========================================================================
``spec``      the review spec: cells (methods × K × privacy, tuned or ``lr_from``), the
              evaluation/tuning seed split, the target rule
``design``    :class:`~analysis.ma_review.design.ReviewStudy`: the cells and every scenario
``oracle``    the oracle count mode of the ablation (exact W; not private)
``measures``  what one run gives: crossings, privacy (ε, each client's), the noise gain
``tables``    ``results.csv``, ``tuning.csv``, ``curves.csv``: columns, writing, reading
``run``       target from the reference, tuning on held-out seeds, evaluation, tables
``compare``   the statistics of the report (restricted means, paired ratios, interaction,
              learning-rate sensitivity), from the tables' rows
``claims``    the claims table and its verdict rules
``figures``   curves, bias, tuning and noise figures (PNG and PDF)
``report``    ``report.md``
``__main__``  the command line
============  ===========================================================================
"""
