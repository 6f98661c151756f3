"""Scripts that produce the committed results under ``analysis/results/`` (docs/architecture.md §2;
docs/architecture.md, "Layout"). Not installed: run them from the repository root as
``python -m analysis.NAME``. Each imports only the ``asyncfl`` library (never its CLI); the
momentum-approximation study and the privacy sweep live in :mod:`asyncfl.studies`."""
