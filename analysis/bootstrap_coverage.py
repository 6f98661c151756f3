"""How often the paired bootstrap interval of the restricted-mean ratio covers the true ratio at
few seeds (docs/studies.md §5): the simulation behind the choice of the expanded percentile
interval as :func:`asyncfl.studies.paired_rmst_ratio`'s default.

Model of one study: ``n`` seeds; seed ``i`` shifts both methods alike (its data split and initial
model), ``e_i ~ N(0, 0.3²)``; the base's steps to target ``T_b = m_b · exp(e_i + ε_b)``, the rule's
``T_r = m_r · exp(e_i + ε_r)``, ``ε ~ N(0, σ²)``; a time above ``h = 300`` is censored there. The
true ratio is ``E[min(T_b, h)] / E[min(T_r, h)]`` from 2·10⁶ draws. Each of ``reps`` studies
computes every interval of :data:`asyncfl.studies.survival.INTERVALS` from the same resamples,
plus BCa at the expanded level, and the script prints the share of studies whose interval holds
the true ratio and the mean width of the interval in ``ln``.

    python -m analysis.bootstrap_coverage [--reps 1000] [--resamples 9999]
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
from scipy import stats

from asyncfl.studies.survival import expanded_level, restricted_means

H = 300.0
SEED_SD = 0.3
#: (seeds, run-to-run σ, base scale m_b, rule scale m_r)
SETTINGS = [(n, sd, mb, mr) for n in (5, 10, 20) for sd, mb, mr in ((0.3, 120, 80), (0.8, 120, 80), (0.8, 250, 150))]


def true_ratio(sd: float, mb: float, mr: float) -> float:
    z = np.random.default_rng(0).normal(0, np.hypot(SEED_SD, sd), 2_000_000)
    return float(np.minimum(mb * np.exp(z), H).mean() / np.minimum(mr * np.exp(z), H).mean())


def _ratio(bt: np.ndarray, bd: np.ndarray, rt: np.ndarray, rd: np.ndarray, axis: int = -1) -> np.ndarray:
    return restricted_means(bt, bd > 0.5, H) / restricted_means(rt, rd > 0.5, H)


def coverage(n: int, sd: float, mb: float, mr: float, reps: int, resamples: int) -> tuple[float, float, dict[str, tuple[float, float]]]:
    truth = true_ratio(sd, mb, mr)
    rng = np.random.default_rng(1)
    level = expanded_level(n)
    ways = {"percentile": ("percentile", 0.95), "BCa": ("BCa", 0.95), "expanded": ("percentile", level),
            "expanded BCa": ("BCa", level)}
    hits = dict.fromkeys(ways, 0)
    widths = dict.fromkeys(ways, 0.0)
    censored = 0
    for r in range(reps):
        e = rng.normal(0, SEED_SD, n)
        b, u = mb * np.exp(e + rng.normal(0, sd, n)), mr * np.exp(e + rng.normal(0, sd, n))
        bd, ud = b < H, u < H
        censored += int((~bd).sum() + (~ud).sum())
        data = (np.minimum(b, H), bd.astype(float), np.minimum(u, H), ud.astype(float))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            first = stats.bootstrap(data, _ratio, n_resamples=resamples, paired=True, vectorized=True, method="percentile",
                                    random_state=np.random.default_rng(r))
            for name, (method, conf) in ways.items():
                ci = stats.bootstrap(data, _ratio, n_resamples=0, paired=True, vectorized=True, method=method,
                                     confidence_level=conf, bootstrap_result=first).confidence_interval
                hits[name] += bool(ci.low <= truth <= ci.high)
                widths[name] += float(np.log(ci.high / ci.low))
    return truth, censored / (2 * n * reps), {k: (hits[k] / reps, widths[k] / reps) for k in ways}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m analysis.bootstrap_coverage", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1000, help="simulated studies per setting (default 1000)")
    parser.add_argument("--resamples", type=int, default=9999, help="bootstrap resamples per study (default 9999)")
    args = parser.parse_args(argv)
    for name in ("reps", "resamples"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} = {getattr(args, name)}: must be at least 1")
    print("| seeds | σ | m_b / m_r | censored | true ratio | percentile | BCa | expanded | expanded BCa |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, sd, mb, mr in SETTINGS:
        truth, cens, out = coverage(n, sd, mb, mr, args.reps, args.resamples)
        cells = " | ".join(f"{c:.3f} ({w:.2f})" for c, w in out.values())
        print(f"| {n} | {sd} | {mb} / {mr} | {cens:.0%} | {truth:.3f} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
