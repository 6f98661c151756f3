"""Optimality gap of the synchronous baselines (and FedBuff for reference), docs/baselines.md.

``python -m analysis.baselines --out DIR`` runs FedAvg, FedProx, FedSplit, FedDR (also with the
linear inexactness schedule, ``feddr-linear``), FedPD (``server.protocol = "sync"``) and, on
FedBuff, plain SGD, momentum, MA-light, the delay-adaptive step, FADAS, CA2FL and asynchronous
FedDR (docs/async-optimisers.md; one configuration each, a first look) on two problems,

* ``least-squares``: the quadratic task's random problem, ``f_k(θ) = ½‖A_kθ − b_k‖²``;
* ``logreg``: synthetic (1, 1) with an L2-regularised logistic regression,
  ``f_k(θ) = mean_i CE_k,i(θ) + (l2/2)‖θ‖²``;

FedPD once with ``p = 0`` and once skipping with ``p = 0.2`` (``fedpd-skip``), the FedBuff runs
until they reach the sync runs' final virtual time; all with the same inexact local solver (full-batch gradient steps, warm-started as docs/baselines.md
says), and plots the optimality gap ``F(θ_t) − F*`` of

    F(θ) = (1/K) Σ_k f_k(θ)          (FedDR's F with g = 0, docs/baselines.md §4)

against server steps (rounds) and against virtual time, on log scales. ``F*`` is scipy's:
``scipy.linalg.lstsq`` on the stacked least-squares data, L-BFGS on the pooled logistic objective
(computed in numpy here, not with the simulator's code). ``F`` is evaluated on the server's model
after every step, so a FedPD round that skips communication shows as a flat step.

(``metrics.csv``'s ``train_loss`` is the sample-weighted mean over the pooled data, a different
weighting from ``F`` when clients hold different amounts of data, so it is not used here.)

Writes ``gaps.png``, ``gaps.csv`` (every step of every run) and ``gaps.md`` (final gaps).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import scipy.linalg
import scipy.optimize

from asyncfl.config import scenario as sc
from asyncfl.compose import build_simulation
from asyncfl.sim.engine import Simulation

SYNC = ("fedavg", "fedprox", "fedsplit", "feddr", "feddr-linear", "fedpd", "fedpd-skip")
#: FedBuff runs (dashed), stopped at the sync runs' final virtual time: plain FedBuff SGD, heavy-ball
#: and MA-light momentum, and the comparators of docs/async-optimisers.md at one configuration each
ASYNC = ("fedbuff", "fedbuff-momentum", "fedbuff-ma-light", "fedbuff-sgd-delay", "fedbuff-fadas", "ca2fl", "feddr-async")
ALGORITHMS = SYNC + ASYNC
FADAS_LR = 0.02  # FADAS's steps are sign-like (docs/async-optimisers.md §3): η is the per-coordinate step
SKIP = 0.2  # FedPD's skip probability p in the "fedpd-skip" run ("fedpd" has p = 0)
Objective = Callable[[np.ndarray], float]


# ----------------------------------------------------------------------------------------------
# problems: a base scenario, the objective F and F*
def problem_scenarios(name: str, clients: int, rounds: int, seed: int) -> dict[str, dict[str, Any]]:
    """Raw scenarios of every algorithm on problem ``name`` (shared keys, per-algorithm keys)."""
    if name == "least-squares":
        task = {"name": "quadratic", "problem": "random", "dim": 20, "samples_per_client": 50}
        local = {"solver": "sgd", "lr": 0.004, "local_steps": 10}
        mu = 20.0
    elif name == "logreg":
        # The logit-sum directions have curvature l2 only and the data directions up to ~150
        # (seed 0, 10 clients): l2 = 1 keeps κ ≈ 150, lr < 2/(L + μ) keeps the local solver stable.
        task = {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "model": "logreg", "l2": 1.0}
        local = {"solver": "sgd", "lr": 0.01, "local_steps": 10}
        mu = 10.0
    else:
        raise ValueError(f"unknown problem {name!r}; known: least-squares, logreg")
    base = {
        "seed": seed,
        "population": {"clients": clients, "speed_sigma": 0.5},
        "latency": {"dist": "exponential", "mean": 1.0},
        "task": task,
        "run": {"steps": rounds, "eval_every": 10**6},
    }
    sync = {"protocol": "sync", "cohort": clients}
    per_algorithm = {
        "fedavg": ({**local}, {**sync, "algorithm": "fedavg"}),
        "fedprox": ({**local, "mu": mu}, {**sync, "algorithm": "fedprox"}),
        "fedsplit": ({**local, "mu": mu}, {**sync, "algorithm": "fedsplit"}),
        "feddr": ({**local, "mu": mu}, {**sync, "algorithm": "feddr", "alpha": 1.5}),
        "fedpd": ({**local, "mu": mu}, {**sync, "algorithm": "fedpd", "skip_probability": 0.0}),
        "fedpd-skip": ({**local, "mu": mu}, {**sync, "algorithm": "fedpd", "skip_probability": SKIP}),
        # the inexactness schedule (docs/baselines.md §4.2): one more local step every 5 rounds
        "feddr-linear": ({**local, "mu": mu}, {**sync, "algorithm": "feddr", "alpha": 1.5,
                                               "feddr_schedule": "linear", "feddr_growth": 0.2}),
    }
    buff = {"protocol": "fedbuff", "concurrency": clients, "buffer": max(1, clients // 2)}
    per_algorithm.update({
        "fedbuff": ({**local}, {**buff, "rule": "sgd", "lr": 1.0}),
        "fedbuff-momentum": ({**local}, {**buff, "rule": "momentum", "lr": 0.1, "beta": 0.9}),
        "fedbuff-ma-light": ({**local}, {**buff, "rule": "ma-light", "lr": 0.1, "beta": 0.9}),
        "fedbuff-sgd-delay": ({**local}, {**buff, "rule": "sgd-delay", "lr": 1.0}),
        "fedbuff-fadas": ({**local}, {**buff, "rule": "fadas", "lr": FADAS_LR}),
        "ca2fl": ({**local}, {**buff, "algorithm": "ca2fl", "rule": "sgd", "lr": 1.0}),
        "feddr-async": ({**local, "mu": mu}, {**buff, "algorithm": "feddr", "alpha": 1.5}),
    })
    raws = {alg: {**base, "name": f"{name}-{alg}", "client": c, "server": s} for alg, (c, s) in per_algorithm.items()}
    # FedBuff steps more often than a sync round ends: give it enough steps to cover the sync runs'
    # virtual time; trace() stops it once it passes the end of the sync runs.
    for alg in ASYNC:
        raws[alg]["run"] = {**base["run"], "steps": 20 * rounds}
    return raws


def least_squares_objective(sim: Simulation) -> tuple[Objective, float]:
    A = [c.x.double().numpy() for c in sim.task.clients]
    b = [c.y.double().numpy() for c in sim.task.clients]
    K = len(A)

    def F(theta: np.ndarray) -> float:
        return sum(0.5 * float(np.sum((a @ theta - y) ** 2)) for a, y in zip(A, b)) / K

    theta_star = scipy.linalg.lstsq(np.vstack(A), np.concatenate(b))[0]
    return F, F(theta_star)


def logreg_objective(sim: Simulation, l2: float) -> tuple[Objective, float]:
    """``F(θ) = (1/K) Σ_k [mean_i CE(W x_i + c, y_i) + (l2/2)‖θ‖²]``, θ = (W [C, d], c [C])."""
    X = [c.x.double().numpy() for c in sim.task.clients]
    Y = [c.y.numpy() for c in sim.task.clients]
    d = X[0].shape[1]
    C = sim.task.dim // (d + 1)

    def value_and_grad(w: np.ndarray) -> tuple[float, np.ndarray]:
        W, c = w[: C * d].reshape(C, d), w[C * d:]
        value, grad = 0.0, np.zeros_like(w)
        for x, y in zip(X, Y):
            z = x @ W.T + c
            z -= z.max(axis=1, keepdims=True)
            lse = np.log(np.exp(z).sum(axis=1))
            value += float(np.mean(lse - z[np.arange(len(y)), y]))
            p = np.exp(z - lse[:, None])
            p[np.arange(len(y)), y] -= 1.0
            p /= len(y)
            grad[: C * d] += (p.T @ x).ravel()
            grad[C * d:] += p.sum(axis=0)
        K = len(X)
        return value / K + 0.5 * l2 * float(w @ w), grad / K + l2 * w

    res = scipy.optimize.minimize(value_and_grad, np.zeros(sim.task.dim), jac=True, method="L-BFGS-B",
                                  options={"maxiter": 20_000, "gtol": 1e-12, "ftol": 1e-16})
    return (lambda w: value_and_grad(w)[0]), float(res.fun)


# ----------------------------------------------------------------------------------------------
def trace(raw: dict[str, Any], F: Objective, F_star: float, until_time: float = np.inf) -> list[tuple[int, float, float]]:
    """``(step, virtual time, F(θ_t) − F*)`` after every server step (step 0 = the start), up to
    the first step at or past ``until_time``."""
    sim = build_simulation(sc.validate(raw))
    rows = [(0, 0.0, F(sim.theta.double().numpy()) - F_star)]

    async def go() -> None:
        async for event in sim.events():
            rows.append((event.step, event.time, F(sim.theta.double().numpy()) - F_star))
            if event.time >= until_time:
                break

    asyncio.run(go())
    return rows


def run_problem(name: str, clients: int, rounds: int, seed: int, log: Callable[[str], None]) -> dict[str, Any]:
    raws = problem_scenarios(name, clients, rounds, seed)
    probe = build_simulation(sc.validate(raws["fedavg"]))
    if name == "least-squares":
        F, F_star = least_squares_objective(probe)
    else:
        F, F_star = logreg_objective(probe, raws["fedavg"]["task"]["l2"])
    out: dict[str, Any] = {"F_star": F_star, "traces": {}}
    for alg in ALGORITHMS:
        start = time.perf_counter()
        sync_end = max((rows[-1][1] for a, rows in out["traces"].items() if a in SYNC), default=np.inf)
        out["traces"][alg] = trace(raws[alg], F, F_star, until_time=sync_end if alg in ASYNC else np.inf)
        last = out["traces"][alg][-1]
        log(f"{name:14s} {alg:9s} final gap {last[2]:.3e} (F* = {F_star:.6g}) at t = {last[1]:.1f} "
            f"[{time.perf_counter() - start:.1f} s]")
    return out


def plot(results: dict[str, dict[str, Any]], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    problems = list(results)
    fig = Figure(figsize=(11, 4.2 * len(problems)))
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(problems), 2, squeeze=False)
    floor = 1e-16  # log scale: gaps at or below round-off are drawn at the floor
    for row, problem in enumerate(problems):
        for alg, rows in results[problem]["traces"].items():
            arr = np.asarray(rows)
            gap = np.maximum(arr[:, 2], floor)
            style = {"linestyle": "--"} if alg in ASYNC else {}
            axes[row, 0].plot(np.maximum(arr[:, 0], 1), gap, label=alg, **style)
            axes[row, 1].plot(np.maximum(arr[:, 1], arr[1, 1] / 2 if len(arr) > 1 else 1), gap, label=alg, **style)
        for col, xlabel in enumerate(("server steps (rounds)", "virtual time")):
            ax = axes[row, col]
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("F(θ) − F*")
            ax.set_title(f"{problem} (F* = {results[problem]['F_star']:.6g})")
            ax.grid(True, which="both", alpha=0.3)
        axes[row, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def write_tables(results: dict[str, dict[str, Any]], out: Path) -> str:
    with open(out / "gaps.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["problem", "algorithm", "step", "time", "gap", "F_star"])
        for problem, res in results.items():
            for alg, rows in res["traces"].items():
                for step, t, gap in rows:
                    writer.writerow([problem, alg, step, repr(t), repr(gap), repr(res["F_star"])])
    problems = list(results)
    lines = ["| algorithm | " + " | ".join(f"{p}: final F − F*" for p in problems) + " |",
             "|---|" + "---|" * len(problems)]
    for alg in ALGORITHMS:
        cells = []
        for p in problems:
            rows = results[p]["traces"][alg]
            cells.append(f"{rows[-1][2]:.3e} (step {rows[-1][0]}, t = {rows[-1][1]:.0f})")
        lines.append(f"| {alg} | " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    (out / "gaps.md").write_text(table, encoding="utf-8")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--rounds", type=int, default=100, help="rounds of the sync runs")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--problems", nargs="+", default=["least-squares", "logreg"])
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results = {p: run_problem(p, args.clients, args.rounds, args.seed, lambda m: print(m, flush=True)) for p in args.problems}
    plot(results, args.out / "gaps.png")
    print(write_tables(results, args.out))
    print(f"wrote {args.out / 'gaps.png'}, gaps.csv, gaps.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
