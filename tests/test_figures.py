"""Figures a paper can use (docs/run-directory.md §11): every command that draws writes PNG, PDF
and SVG; the shared 95 % CI helper against scipy; the in-flight summary of staleness.png; the
bias floor against an independent least-squares solve; TensorBoard logging read back."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from analysis.privacy_sweep.__main__ import main as privacy_main
from asyncfl.cli.main import main
from asyncfl.figures.ci import mean_ci, mean_ci_columns
from asyncfl.figures.staleness import in_flight_bands
from asyncfl.figures.style import FORMATS, with_format
from asyncfl.run.runner import run_to_dir_blocking
from asyncfl.server.aggregation import weight_matrix
from asyncfl.server.bias import bias_report, floor_residuals
from asyncfl.server.ma import coefficient_matrix_full, target_matrix

from conftest import make_scenario

MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF", "svg": b"<?xml"}


def assert_figure(path: Path, fmt: str) -> None:
    assert path.suffix == f".{fmt}" and path.is_file(), path
    assert path.read_bytes().lstrip()[: len(MAGIC[fmt])] == MAGIC[fmt]
    assert path.stat().st_size > 5_000


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fig") / "run"
    run_to_dir_blocking(make_scenario({"name": "figure-run"}), out)
    return out


# -- every drawing command, every format -------------------------------------------------------
@pytest.mark.parametrize("fmt", [f if f == "png" else pytest.param(f, marks=pytest.mark.slow) for f in FORMATS])  # png: the fast subset's
def test_run_plot_compare_bias_and_staleness_write_each_format(run_dir, tmp_path, fmt, capsys):
    from analysis.staleness import main as staleness_main

    out = tmp_path / "run"
    scenario = run_dir / "scenario.toml"
    assert main(["run", str(scenario), "--out", str(out), "--quiet", "--format", fmt]) == 0
    assert_figure(out / f"metrics.{fmt}", fmt)
    assert main(["plot", str(run_dir), str(out), "--out", str(tmp_path / "curves.png"), "--format", fmt]) == 0
    assert_figure(tmp_path / f"curves.{fmt}", fmt)  # --format wins over the suffix
    assert main(["compare", str(run_dir), str(out), "--metric", "loss", "--out", str(tmp_path / f"cmp.{fmt}")]) == 0
    assert_figure(tmp_path / f"cmp.{fmt}", fmt)
    assert main(["bias", str(out), "--format", fmt]) == 0
    assert_figure(out / f"bias_heatmaps.{fmt}", fmt)
    assert staleness_main([str(out), "--format", fmt]) == 0
    assert_figure(out / f"staleness.{fmt}", fmt)
    capsys.readouterr()


@pytest.mark.slow
def test_privacy_sweep_writes_each_format(tmp_path, capsys):
    from test_privacy_sweep import SCENARIO  # the sweep test's small private scenario

    import tomli_w

    path = tmp_path / "private.toml"
    path.write_text(tomli_w.dumps(SCENARIO))
    for fmt in FORMATS:
        out = tmp_path / fmt
        assert privacy_main([str(path), "--xi", "5", "--rules", "momentum", "--out", str(out), "--quiet", "--format", fmt]) == 0
        assert_figure(out / f"sweep.{fmt}", fmt)
    capsys.readouterr()


def test_a_bad_format_exits_2_naming_the_option(run_dir, capsys):
    assert main(["plot", str(run_dir), "--format", "jpg"]) == 2
    assert "argument --format: invalid choice: 'jpg'" in capsys.readouterr().err
    assert with_format("a/b.png", "svg") == Path("a/b.svg") and with_format("a/b", None) == Path("a/b.png")


# -- the shared confidence interval ------------------------------------------------------------
@pytest.mark.parametrize("values", [[0.81, 0.79, 0.85], [1.0, 2.0], [3.0, 3.5, 2.0, 8.0, 1.0, 0.5]])
def test_mean_ci_is_students_t_interval_as_scipy_computes_it(values):
    ci = mean_ci(values)
    low, high = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
    assert ci.n == len(values) and ci.mean == pytest.approx(np.mean(values), rel=1e-15)
    assert (ci.low, ci.high) == (pytest.approx(low, rel=1e-12), pytest.approx(high, rel=1e-12))
    assert mean_ci(values, 0.99).half > ci.half


def test_mean_ci_edge_cases_and_columns():
    assert mean_ci([]).n == 0 and math.isnan(mean_ci([]).mean)
    one = mean_ci([0.4])
    assert one.mean == 0.4 and math.isnan(one.half) and one.text() == "0.4 (n = 1)"
    assert mean_ci([1.0, float("nan"), 3.0, float("inf")]) == mean_ci([1.0, 3.0])  # non-finite runs left out
    rows = np.array([[1.0, 2.0], [3.0, 2.0], [5.0, 2.0]])
    means, halves = mean_ci_columns(rows)
    np.testing.assert_allclose(means, [3.0, 2.0])
    assert halves[0] == pytest.approx(stats.t.ppf(0.975, 2) * 2.0 / math.sqrt(3)) and halves[1] == 0.0
    with pytest.raises(ValueError):
        mean_ci([1.0, 2.0], 1.5)


# -- staleness.png's clients-in-flight panel ---------------------------------------------------
def test_in_flight_bands_are_time_weighted_means_and_ranges():
    # level 2 on [0, 1), 3 on [1, 1.5), 1 on [1.5, 4]; two bins of width 2
    times, level = np.array([0.0, 1.0, 1.5, 4.0]), np.array([2, 3, 1, 1])
    centres, mean, lo, hi = in_flight_bands(times, level, bins=2)
    np.testing.assert_allclose(centres, [1.0, 3.0])
    np.testing.assert_allclose(mean, [(2 * 1 + 3 * 0.5 + 1 * 0.5) / 2, 1.0])
    np.testing.assert_array_equal(lo, [1, 1])
    np.testing.assert_array_equal(hi, [3, 1])


# -- the floor of asyncfl bias ------------------------------------------------------------------
def test_floor_is_the_least_squares_residual_row_by_row():
    rng = np.random.default_rng(4)
    T, C, L = 25, 3, 6
    counts = np.zeros((T, L), dtype=np.int64)
    for t in range(T):  # sparse, often singular patterns: many steps with no fresh update
        for tau in rng.choice(min(L, t + 1), size=C, replace=True):
            counts[t, tau] += 1
    W = weight_matrix(counts, 0.5, C)
    M = target_matrix("momentum", 0.9, T)
    floor = floor_residuals(W, M)
    for t in range(T):  # independent: numpy's least squares on the rows the server has by step t
        a = np.linalg.lstsq(W[: t + 1].T, M[t], rcond=None)[0]
        assert floor[t] == pytest.approx(np.linalg.norm(a @ W[: t + 1] - M[t]), rel=1e-8, abs=1e-10)
    report = bias_report(counts, 0.5, C, 0.9, "momentum", ridge=1e-3)
    assert report["floor"] == pytest.approx(np.linalg.norm(floor) / np.linalg.norm(M), rel=1e-12)
    assert report["floor"] <= min(report["ma_full"], report["ma_light"], report["momentum"]) + 1e-12
    # an invertible W is inverted: floor 0, and MA-full with λ = 0 reaches it
    W_inv = np.tril(rng.uniform(0.1, 1.0, (8, 8)))
    np.testing.assert_allclose(floor_residuals(W_inv, target_matrix("momentum", 0.9, 8)), 0.0, atol=1e-10)
    A0 = coefficient_matrix_full(W, "momentum", 0.9, 0.0)
    np.testing.assert_allclose(np.linalg.norm(A0 @ W - M, axis=1), floor, rtol=1e-6, atol=1e-8)


def test_asyncfl_bias_prints_the_floor_and_says_when_w_is_identity(run_dir, tmp_path, capsys):
    assert main(["bias", str(run_dir)]) == 0
    out = capsys.readouterr().out
    report = json.loads((run_dir / "bias.json").read_text())
    assert f"floor for this W = {report['floor']:.4f}" in out and "floor (best" in out
    assert report["identity_w"] is False
    sync = tmp_path / "sync"
    run_to_dir_blocking(make_scenario({"server.protocol": "sync", "server.concurrency": None, "server.cohort": 4,
                                       "server.max_staleness": None}), sync)
    assert main(["bias", str(sync)]) == 0
    out = capsys.readouterr().out
    assert "W = I" in out and "no implicit momentum bias" in out
    assert json.loads((sync / "bias.json").read_text())["identity_w"] is True


# -- TensorBoard ----------------------------------------------------------------------------------
def test_tensorboard_logs_the_evaluations_and_staleness(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    run_to_dir_blocking(make_scenario({"run.tensorboard": True}), out)
    acc = EventAccumulator(str(out / "tensorboard"), size_guidance={"histograms": 0, "scalars": 0})  # keep every event
    acc.Reload()
    metrics = [r for r in __import__("csv").DictReader(open(out / "metrics.csv"))][1:]  # step 0 precedes the first event
    loss = acc.Scalars("eval/loss")
    assert [e.step for e in loss] == [int(r["step"]) for r in metrics]
    np.testing.assert_allclose([e.value for e in loss], [float(r["loss"]) for r in metrics], rtol=1e-6)
    np.testing.assert_allclose([e.value for e in acc.Scalars("staleness/mean")], [float(r["staleness_mean"]) for r in metrics], rtol=1e-6)
    np.testing.assert_allclose([e.value for e in acc.Scalars("eval/gap")], [float(r["gap"]) for r in metrics], rtol=1e-5)
    hist = acc.Histograms("staleness/accepted")
    with np.load(out / "counts.npz") as data:
        counts = data["by_staleness"]
    assert [h.step for h in hist] == [4, 8, 12]
    assert hist[0].histogram_value.num == counts[:4].sum()  # the updates accepted since the previous evaluation
    assert "tensorboard" not in (out / "summary.json").read_text()  # machinery, not state


def test_a_diverged_runs_curve_is_drawn_without_its_overflowing_values(tmp_path, capsys):
    """A quadratic run at the quickstart's rates diverges at step 10 (test loss ≈ 7·10²⁸⁷): the
    run exits 3 naming the fault, with no traceback, and metrics.png is still written — the values
    beyond 10¹⁰⁰ are gaps in the curve (a log axis's ticks overflow a float there), kept in metrics.csv."""
    from asyncfl.figures.metrics import PLOT_LIMIT, plottable

    assert plottable([1.0, math.inf, -2e100, 7.19e287, math.nan]) == pytest.approx([1.0, math.nan, math.nan, math.nan, math.nan], nan_ok=True)
    assert plottable([PLOT_LIMIT, -PLOT_LIMIT]) == [PLOT_LIMIT, -PLOT_LIMIT]
    out = tmp_path / "run"
    code = main(["run", "scenarios/quickstart.toml", "--set", "run.steps=20", "--set", "task.name=quadratic",
                 "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 3 and "diverged" in err and "Traceback" not in err
    assert (out / "metrics.png").stat().st_size > 0
    import csv

    losses = [float(row["loss"]) for row in csv.DictReader((out / "metrics.csv").open()) if row["loss"]]
    assert max(losses) > PLOT_LIMIT
