"""The experiment engine (docs/architecture.md §9): what every study of many runs is built on.

* :mod:`asyncfl.studies.sweep` — a grid of scenario keys × seeds, its point names and scenarios,
  run through the placement layer (:mod:`asyncfl.run.parallel`: in process, a process pool or
  Ray) in a folder claimed and resumed by the folder rule (:mod:`asyncfl.run.outdir`), tabulated
  with Student-t 95 % intervals (:func:`asyncfl.figures.ci.mean_ci`); ``asyncfl sweep``;
* :mod:`asyncfl.studies.stats` — paired comparisons over seeds (the speed-up of one method over
  another with its interval).

Studies of their own (the momentum-approximation study, the privacy–utility sweep) are scripts
under ``analysis/`` on top of this engine; nothing here knows them. Run files are read back
through :class:`asyncfl.results.Run`.
"""
