"""Implicit momentum bias of a recorded run (docs/server-rules.md; docs/server-rules.md): ``bias.json``.

From a run directory (``scenario.toml``, ``counts.npz``) this builds the exact ``W`` from the
counts, the target ``M`` from the run's β and ``ma_target``, and the coefficient matrices of
naive momentum (``A = M``), MA-full (with the run's ``ma_ridge`` and ``ma_window``) and MA-light.
The rule the run actually used contributes the coefficients it recorded (``counts.npz``
``coefficients``).

With privacy, the server only saw the noisy estimate ``Ŵ`` (the post-processed
``private_by_staleness``): the MA coefficients are those computed on ``Ŵ`` — what the server
would have done — and their bias is measured against the exact ``W`` (the top-level keys) and
against ``Ŵ`` (``noisy_w``).

Every step is analysed, on the band of ``W`` (:mod:`asyncfl.server.banded`: time and memory
``O(T × staleness window)``; ``ma_full_truncation`` states the one approximation). Only where
MA-full's coefficients must be computed offline with ``λ = 0`` is the dense report used, on the
first :data:`MAX_ANALYSED_STEPS` steps (``W`` is lower triangular, so the leading block is
self-contained); ``steps_analysed`` says how many. The heat maps draw the first
:data:`HEATMAP_STEPS` steps.

The report also holds the ``floor`` (the bias of MA-full with ``λ = 0`` and no window, the lowest
any weighting of the aggregates can reach on this ``W``; docs/server-rules.md §7) and
``identity_w`` (``W = I``: every update fresh, as in every synchronous run, so no rule has an
implicit bias). The runner calls :func:`finish_hook` after every run; ``asyncfl bias``
(:mod:`asyncfl.cli.bias`) prints the same report as a table and draws the heat maps
(:mod:`asyncfl.figures.bias`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from asyncfl.config import scenario as scenario_mod
from asyncfl.config.memory import BIAS_REPORT_STEPS
from asyncfl.config.server import MAFullConfig
from asyncfl.errors import RunDirError
from asyncfl.privacy.mechanism import postprocess_counts
from asyncfl.run.counts_file import read_counts
from asyncfl.run.rundir import csv_columns, write_json
from asyncfl.server.aggregation import weight_matrix
from asyncfl.server.banded import banded_report
from asyncfl.server.bias import bias_report
from asyncfl.server.imbalance import participation_summary
from asyncfl.server.ma import coefficient_matrix_full, light_recursion, target_matrix
from asyncfl.staleness_counts import StalenessCounts

MAX_ANALYSED_STEPS = BIAS_REPORT_STEPS  # the dense report's steps (offline MA-full with λ = 0 only)
#: steps drawn in ``bias_heatmaps.png`` (dense ``T'×T'`` panels: more would not be visible)
HEATMAP_STEPS = 400
RULE_KEYS = ("none", "momentum", "ma_full", "ma_light")


class Analysis(NamedTuple):
    """The momentum the bias is measured against and the MA it is compared with: the target's
    kind and β, MA-full's ridge λ and window L (docs/server-rules.md §7)."""

    kind: str
    beta: float
    ridge: float
    window: int | None


def analysis_of(scenario: scenario_mod.Scenario) -> Analysis:
    """The run's :class:`Analysis`: the rule's own ``beta``, ``ma_target``, ``ma_ridge`` and
    ``ma_window`` where its config has them, else the rule's declared target kind and MA-full's
    defaults (a run of SGD is compared with the momentum it does not use)."""
    cfg, traits = scenario.config_of("rule"), scenario.component("rule").traits
    fields = MAFullConfig.model_fields
    return Analysis(getattr(cfg, "ma_target", traits.target), getattr(cfg, "beta", fields["beta"].default),
                    getattr(cfg, "ma_ridge", fields["ma_ridge"].default), getattr(cfg, "ma_window", None))


def own_bias(scenario: scenario_mod.Scenario, bias: dict[str, Any] | None) -> float:
    """The implicit momentum bias of the rule the run used (its ``own_bias`` trait's row of
    ``bias.json``): 0 when the protocol's uploads are never stale (``W = I``: sync), NaN when the
    algorithm uses no rule, the rule has no linear target (Adam), or there is no report."""
    if not scenario.component("algorithm").traits.uses_rule:
        return math.nan
    key = scenario.component("rule").traits.own_bias
    if key is None:
        return math.nan
    if not scenario.component("protocol").traits.stale:
        return 0.0
    value = (bias or {}).get(key, math.nan)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def read_run_counts(run_dir: str | Path) -> tuple[scenario_mod.Scenario, StalenessCounts, dict[str, np.ndarray]]:
    """The run's scenario, its staleness counts (either layout of ``counts.npz``, read by
    :func:`~asyncfl.run.counts_file.read_counts`) and the file's other arrays, checked:
    ``private_by_staleness`` and ``coefficients``, when present, float arrays with T rows. Every
    problem is a RunDirError naming the file."""
    run_dir = Path(run_dir)
    for name in ("scenario.toml", "counts.npz"):
        if not (run_dir / name).exists():
            raise RunDirError(f"{run_dir}: not a complete run directory ({name} is missing)")
    scenario = scenario_mod.load(run_dir / "scenario.toml", run_dir=True)
    path = run_dir / "counts.npz"
    counts, arrays = read_counts(path)
    for key in ("private_by_staleness", "coefficients"):
        value = arrays.get(key)
        if value is not None and (value.ndim != 2 or value.dtype.kind != "f" or len(value) != counts.steps or not np.isfinite(value).all()):
            raise RunDirError(f"{path}: {key} must be a 2-d array of finite floats with one row per step ({counts.steps})")
    return scenario, counts, arrays


def leading_counts(counts: StalenessCounts, steps: int, observed: bool = False) -> np.ndarray:
    """``by_staleness[:steps, :min(L, steps)]``: all that the leading ``steps × steps`` block of
    ``W`` depends on (``W[t, t−τ]`` with ``1 ≤ t − τ``, so ``τ < steps`` there), without
    densifying the ``L = max_staleness + 1`` columns of the whole record; ``observed``: only up
    to the largest staleness seen (the band of ``W``)."""
    width = min(counts.width, max(steps, 1))
    if observed:
        width = min(width, len(counts.histogram(0, steps)))
    return counts.dense(0, steps, width)


def seen_counts(scenario: scenario_mod.Scenario, records: StalenessCounts, arrays: dict[str, np.ndarray],
                steps: int | None = None) -> np.ndarray | None:
    """The staleness counts the server saw with privacy on (post-processed noisy estimates) in the
    first ``steps`` steps (default all); ``records`` are the exact counts, which only a count mode
    declared as an analysis oracle reads (docs/privacy.md §3)."""
    raw = arrays.get("private_by_staleness")
    if raw is None or not scenario.privacy.enabled:
        return None
    raw = raw[:steps]
    C = scenario.server.buffer
    # the exact counts, as wide as the noisy rows: read only by an analysis oracle (docs/privacy.md §3)
    exact = np.zeros(raw.shape)
    width = min(raw.shape[1], records.width)
    exact[:, :width] = records.dense(0, len(raw), width)
    return np.stack([postprocess_counts(row, C, scenario.privacy.counts, exact[i]) for i, row in enumerate(raw)]) if len(raw) else raw


def bias_of_run(run_dir: str | Path) -> dict[str, Any]:
    """The ``bias.json`` content of a run directory (see the module docstring), with the clients'
    participation read from ``updates.csv`` when the directory has one."""
    scenario, counts, arrays = read_run_counts(run_dir)
    report = bias_of_records(scenario, counts, arrays)
    updates = Path(run_dir) / "updates.csv"
    if updates.exists():
        report["participation"] = participation_summary(participation_counts(updates, scenario.population.clients))
    return report


def participation_counts(path: Path, clients: int) -> np.ndarray:
    """Accepted uploads per client (length ``clients``, zeros included) from ``updates.csv``; a
    row naming a client outside ``0 … clients−1`` is a RunDirError naming the file."""
    counts = np.zeros(clients, dtype=np.int64)
    for i, (accepted, client) in csv_columns(path, ("accepted", "client")):
        if accepted != "true":
            continue
        try:
            k = int(client)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise RunDirError(f"{path}: line {i}: client {client!r} is not an integer") from None
        if not 0 <= k < clients:
            raise RunDirError(f"{path}: line {i}: client {k} is outside 0 … {clients - 1} (population.clients = {clients})")
        counts[k] += 1
    return counts


def bias_of_records(scenario: scenario_mod.Scenario, records: StalenessCounts, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """The report on every step of the run, computed on the band of ``W``
    (:func:`asyncfl.server.banded.banded_report`, docs/server-rules.md §7.1); the dense
    computation on the first :data:`MAX_ANALYSED_STEPS` steps only where MA-full's coefficients
    must be computed offline with ``λ = 0`` (min-norm least squares, no banded form)."""
    server = scenario.server
    kind, beta, ridge, window = analysis_of(scenario)
    recorded = scenario.component("rule").traits.coefficients
    coefficients = arrays.get("coefficients")
    if ridge == 0 and not (coefficients is not None and recorded == "full"):
        return dense_bias_of_records(scenario, records, arrays)
    T = records.steps
    if T == 0:
        raise RunDirError("the run has no completed server step: nothing to analyse")
    counts = leading_counts(records, T, observed=True)
    seen = seen_counts(scenario, records, arrays, T)
    p, C = server.staleness_exponent, server.buffer
    used_full = used_light = None
    if coefficients is not None and recorded == "full":
        used_full = coefficients[:T, :T]
    if coefficients is not None and recorded == "pair":
        used_light = coefficients[:T, :2]
    common = dict(exponent=p, buffer=C, beta=beta, kind=kind, ridge=ridge, window=window,
                  used_light=used_light, used_full=used_full, seen=seen)
    report = banded_report(counts, **common)
    out: dict[str, Any] = {key: report[key] for key in RULE_KEYS}
    out["floor"] = report["floor"]  # MA-full with λ = 0: the lowest bias any rule can reach on this W
    for key in ("scale_free", "best_scale", "sampling_noise"):  # docs/server-rules.md §7
        out[key] = report[key]
    out["identity_w"] = report["identity_w"]
    out["amplification"] = report["amplification"]
    out["per_row"] = report["per_row"]
    if used_light is not None or seen is not None:
        out["a_light"] = report["a_light"]
    if seen is not None:
        noisy = banded_report(seen, **common, floor=False)  # fitted on Ŵ, measured on Ŵ
        out["noisy_w"] = {key: noisy[key] for key in RULE_KEYS}
    out.update(rule=server.rule, target=kind, beta=beta, staleness_exponent=p, buffer=C,
               ma_ridge=ridge, ma_window=window, steps_analysed=T,
               steps=records.steps, ma_full_truncation=report["ma_full_truncation"])
    return out


def dense_bias_of_records(scenario: scenario_mod.Scenario, records: StalenessCounts, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """The dense report (:func:`asyncfl.server.bias.bias_report`) on the first
    :data:`MAX_ANALYSED_STEPS` steps: ``W`` is lower triangular, so the leading block is
    self-contained. Used where no banded form exists (offline MA-full with ``λ = 0``)."""
    server = scenario.server
    T = min(records.steps, MAX_ANALYSED_STEPS)
    if T == 0:
        raise RunDirError("the run has no completed server step: nothing to analyse")
    counts = leading_counts(records, T)
    seen = seen_counts(scenario, records, arrays, T)
    kind, beta, ridge, window = analysis_of(scenario)
    p, C = server.staleness_exponent, server.buffer
    recorded = scenario.component("rule").traits.coefficients

    used_full = used_light = None
    coefficients = arrays.get("coefficients")
    if coefficients is not None and recorded == "full":
        used_full = coefficients[:T, :T]
    if coefficients is not None and recorded == "pair":
        used_light = coefficients[:T, :2]
    if seen is not None:  # what MA would have used on the server's view Ŵ
        W_hat = weight_matrix(seen, p, C)
        if used_full is None:
            used_full = coefficient_matrix_full(W_hat, kind, beta, ridge, window)
        if used_light is None:
            used_light = light_recursion(W_hat, kind, beta)[1]

    common = dict(exponent=p, buffer=C, beta=beta, kind=kind, ridge=ridge, window=window,
                  used_light=used_light, used_full=used_full)
    report = bias_report(counts, **common)
    out: dict[str, Any] = {key: report[key] for key in RULE_KEYS}
    out["floor"] = report["floor"]  # MA-full with λ = 0: the lowest bias any rule can reach on this W
    for key in ("scale_free", "best_scale", "sampling_noise"):  # docs/server-rules.md §7
        out[key] = report[key]
    out["identity_w"] = bool(np.allclose(weight_matrix(counts, p, C), np.eye(T), rtol=0, atol=1e-12))
    out["amplification"] = report["amplification"]
    out["per_row"] = report["per_row"]
    if used_light is not None:
        out["a_light"] = report["a_light"]
    if seen is not None:
        noisy = bias_report(seen, **common)
        out["noisy_w"] = {key: noisy[key] for key in RULE_KEYS}
    out.update(rule=server.rule, target=kind, beta=beta, staleness_exponent=p, buffer=C,
               ma_ridge=ridge, ma_window=window, steps_analysed=T,
               steps=records.steps)
    return out


def heatmap_matrices(run_dir: str | Path) -> dict[str, Any]:
    """What ``bias_heatmaps.png`` draws (:mod:`asyncfl.figures.bias`): the run's exact ``W`` (its
    first :data:`HEATMAP_STEPS` steps), the target ``M``, and the ``A`` of MA-full and MA-light
    computed on the ``W`` the server saw (``Ŵ`` with privacy), with the scenario."""
    run_dir = Path(run_dir)
    scenario, counts, arrays = read_run_counts(run_dir)
    server = scenario.server
    T = min(counts.steps, HEATMAP_STEPS)
    if T == 0:
        raise RunDirError(f"{run_dir}: the run has no completed server step: nothing to draw")
    W = weight_matrix(leading_counts(counts, T), server.staleness_exponent, server.buffer)
    seen = seen_counts(scenario, counts, arrays, T)
    W_view = W if seen is None else weight_matrix(seen, server.staleness_exponent, server.buffer)
    kind, beta, ridge, window = analysis_of(scenario)
    return {
        "scenario": scenario, "W": W, "M": target_matrix(kind, beta, T),
        "A_full": coefficient_matrix_full(W_view, kind, beta, ridge, window),
        "A_light": light_recursion(W_view, kind, beta)[0],
    }


def write_bias_json(run_dir: str | Path) -> dict[str, Any]:
    """Compute the report (:func:`bias_of_run`) and write it to ``run_dir/bias.json``."""
    report = bias_of_run(run_dir)
    write_json(Path(run_dir) / "bias.json", report)
    return report


def finish_hook(sim: Any, run_dir: Path) -> None:
    """Runner hook: every run that took a step on a protocol whose uploads can be stale gets a
    ``bias.json`` (a sync run's ``W`` is ``I``)."""
    if sim.settings.stale and sim.steps_done > 0:
        write_bias_json(run_dir)

