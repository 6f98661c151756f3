"""The momentum-approximation review study (issue 28; docs/ma-review.md), a script on the
library's experiment engine, and the study engine the confirmatory study (:mod:`analysis.confirm`)
runs its designs on: ``python -m analysis.ma_review SPEC --out DIR`` runs it,
``python -m analysis.ma_review report --out DIR`` recomputes the report and the figures from the
folder's CSVs alone. The committed results are ``analysis/results/ma_review/``.

Modules, each importing only those above it (no cycle):

============  ===========================================================================
``methods``   the methods a cell compares: names, labels, their scenario keys, bias keys
``entries``   the spec's tasks, DP settings and learning-rate grids
``spec``      the review spec: cells (methods × K × privacy, tuned or ``lr_from``), the
              evaluation/tuning seed split, the target rule; reading and validating it
``scenarios`` a point (one run) and its scenario, every one validated up front
``design``    :class:`~analysis.ma_review.design.ReviewStudy`: the cells, their scenarios,
              the digest
``oracle``    the oracle count mode of the ablation (exact W; not private)
``measures``  what one run gives: status, evaluations, crossings, bias, privacy (ε, each
              client's), the noise gain
``runs``      running a batch of points (resumable: finished runs are read back)
``tables``    ``results.csv``, ``tuning.csv``, ``curves.csv``: columns, writing, reading
``compare``   the statistics of the report (restricted means, paired ratios, interaction,
              learning-rate sensitivity), from the tables' rows
``claims``    the claims table and its verdict rules
``figures``   curves, bias, tuning and noise figures (PNG and PDF)
``report``    ``report.md``
``run``       target from the reference, tuning on held-out seeds, evaluation, tables
``__main__``  the command line
============  ===========================================================================
"""
