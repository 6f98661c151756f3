"""The momentum-approximation study (issue 8; docs/protocol.md §7, docs/privacy.md; seed paper 003;
docs/architecture.md, "Studies and sweeps"; docs/server-rules.md), a script on the library's
experiment engine: run it from the repository root as ``python -m analysis.ma_study SPEC --out
DIR`` (:mod:`analysis.ma_study.__main__`); the committed results are ``analysis/results/ma_paper/``.

A *study spec* (TOML, validated like a scenario: unknown keys and bad values are errors that
name the field) lists tasks, methods, concurrencies ``K = m·C``, seeds, DP off/on and a server
learning-rate grid per method. :func:`analysis.ma_study.run.run_study` then

1. **tunes** the server learning rate of every (task, DP, K, method) on its grid — one seed
   (``tuning.seed``), ``tuning.steps`` server steps — and keeps the value with the highest
   *mean test accuracy over the run's evaluations* (the area under the accuracy curve: it
   rewards reaching a good accuracy early and staying there; a diverged run scores −∞). Every
   method gets the same grid size and the same tuning budget, so none is handicapped;
2. **runs** every (task, DP, K, method, seed) with its tuned learning rate for ``steps`` steps;
3. writes ``results.csv`` (one row per run), ``tuning.csv`` (every tuning run's score) and
   ``report.md`` with its figures.

Every run writes an ordinary run directory under ``DIR/runs/`` (its ``scenario.toml`` reruns it
with ``asyncfl run``). The study is resumable: a run whose ``summary.json`` says ``completed``
(or ``diverged``, which is deterministic) is not run again. When ``tuning.steps == steps`` and
the tuning seed is one of ``seeds``, the winning tuning run *is* that seed's main run.

Modules, each importing only those above it (no cycle):

============  ===========================================================================
``spec``      the spec file: its schema, validation with field names, the methods
``design``    a validated :class:`~analysis.ma_study.design.Study`: its points and
              the scenario of each point (every scenario validated before anything runs)
``results``   reading a finished run directory: status, metrics, the rule's bias
``plan``      the tuning plan (one group per task × DP × K × method) and its score
``tables``    steps-to-target summaries and the speed-up of MA over naive momentum
              (paired by seed: :func:`asyncfl.studies.stats.paired_speedup`)
``figures``   ``curves_<task>_<dp>.png`` and ``bias.png``
``report``    ``report.md``
``outputs``   ``results.csv``, ``tuning.csv`` and ``scenarios/study_*.toml``
``run``       :func:`~analysis.ma_study.run.run_study`: tune, run, write everything
``__main__``  the command line: arguments, progress display, exit codes
============  ===========================================================================
"""
