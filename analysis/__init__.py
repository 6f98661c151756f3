"""Scripts that produce the committed results under ``analysis/results/`` (docs/architecture.md §3,
§9). Not installed: run them from the repository root as ``python -m analysis.NAME``. Each imports
only the ``asyncfl`` library and ``analysis`` itself; a study's command line (``__main__``) also uses
the library's parser helpers, console and exit codes (:func:`asyncfl.cli.main.run_script`). The
momentum-approximation study (:mod:`analysis.ma_review`, on which the confirmatory study
:mod:`analysis.confirm` runs) and the privacy–utility sweep (:mod:`analysis.privacy_sweep`) are
packages on the library's experiment engine. Retired scripts' results stay under
``analysis/results/``, each folder's ``NOTES.md`` naming the commit that holds their code."""
