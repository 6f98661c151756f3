"""Studies built on the simulator (docs/architecture.md, "Studies and sweeps"): each is a package
of small modules with one job each, importing only the library below it (never ``analysis/`` and
never the CLI).

* :mod:`asyncfl.studies.ma_study` — the momentum-approximation study (``asyncfl study``;
  docs/server-rules.md);
* :mod:`asyncfl.studies.privacy_sweep` — the privacy–utility sweep (``asyncfl privacy``;
  docs/privacy.md).
"""
