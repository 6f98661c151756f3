"""jax-privacy and pfl-research as dependencies for correlated noise, against asyncfl's own
torch implementation (asyncfl/privacy/factorization.py; docs/privacy.md §12, issue 26).

Not run by the test suite (neither package is a dependency). Each candidate is installed in a
fresh virtual environment of its own, never in the project's::

    python3 -m venv /tmp/jaxp && /tmp/jaxp/bin/pip install jax-privacy     # 2.0.0 (+ jax, jaxlib)
    python3 -m venv /tmp/pfl  && /tmp/pfl/bin/pip install pfl               # 0.6.0
    /tmp/jaxp/bin/python analysis/privacy_factorization_deps.py jax OUT.json
    /tmp/pfl/bin/python  analysis/privacy_factorization_deps.py pfl
    PYTHONPATH=. .venv/bin/python analysis/privacy_factorization_compare.py OUT.json

``jax`` times the import and ``buffered_toeplitz.optimize`` for T = 2000 (mean error; single
participation, and k = 4 at separation 500) and writes the Toeplitz columns of the strategies it
returns; ``privacy_factorization_compare.py`` (the project's venv) evaluates them with asyncfl's :func:`workload_error` and times asyncfl's
optimiser at the same settings; ``pfl`` tries pfl's ``FTRLMatrixFactorizer``. The numbers of one
run are in analysis/results/privacy_factorization/deps.md.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np


def run_jax(out: str) -> None:
    t = time.perf_counter()
    import jax

    jax.config.update("jax_enable_x64", True)
    from jax_privacy.matrix_factorization import buffered_toeplitz as bt

    result: dict = {"import_s": time.perf_counter() - t}
    for k, b in [(1, 1), (4, 500)]:
        t = time.perf_counter()
        blt = bt.optimize(n=2000, min_sep=b, max_participations=k, error="mean", max_buffers=6)
        result[f"k{k}_b{b}"] = {"optimize_s": time.perf_counter() - t, "coefs": np.asarray(blt.toeplitz_coefs(2000)).tolist()}
    json.dump(result, open(out, "w"))
    print({key: v if not isinstance(v, dict) else v["optimize_s"] for key, v in result.items()})


def run_pfl() -> None:
    t = time.perf_counter()
    from pfl.privacy.ftrl_mechanism import FTRLMatrixFactorizer

    print({"import_s": time.perf_counter() - t})
    try:
        FTRLMatrixFactorizer(np.tril(np.ones(100)), np.ones((100, 100))).optimize()
    except Exception as exc:  # needs a TensorFlow or PyTorch backend set up through pfl
        print("FTRLMatrixFactorizer:", type(exc).__name__, str(exc)[:200])


if __name__ == "__main__":
    {"jax": lambda: run_jax(sys.argv[2]), "pfl": run_pfl}[sys.argv[1]]()
