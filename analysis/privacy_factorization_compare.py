"""Evaluate jax-privacy's strategies (written by analysis/privacy_factorization_deps.py) with
asyncfl's error function and time asyncfl's own optimiser at the same settings (docs/privacy.md
§12). Run: ``PYTHONPATH=. .venv/bin/python analysis/privacy_factorization_compare.py OUT.json``."""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from asyncfl.privacy import factorization as F


def compare(path: str) -> None:
    data = json.load(open(path))
    a = F.prefix_workload(2000)
    for k, b in [(1, 1), (4, 500)]:
        c = np.array(data[f"k{k}_b{b}"]["coefs"])
        theirs = F.workload_error(F.Strategy("toeplitz", 2000, c / c[0]), a, k, b)["rmse"]
        print(f"k={k} b={b}: jax-privacy RMSE {theirs:.11g} in {data[f'k{k}_b{b}']['optimize_s']:.1f} s")
        for n in (2, 3, 4, 5, 6):
            t = time.perf_counter()
            s = F.optimize_blt(a, n, k=k, b=b)
            print(f"  asyncfl BLT, {n} buffers: RMSE {F.workload_error(s, a, k, b)['rmse']:.11g} in {time.perf_counter() - t:.2f} s")
        print(f"  square root {F.workload_error(F.sqrt_strategy(2000), a, k, b)['rmse']:.5g}, "
              f"i.i.d. {F.workload_error(F.identity_strategy(2000), a, k, b)['rmse']:.5g}")



if __name__ == "__main__":
    compare(sys.argv[1])
