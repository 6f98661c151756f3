"""Experiment trackers (``run.trackers``; docs/run-directory.md §15), read back by the trackers'
own means: MLflow's client on a file store the test creates, W&B's offline ``.wandb`` file
parsed record by record (its LevelDB-style log of ``Record`` protobufs), TensorBoard's loader.
Every logged number is compared with the run directory's ``metrics.csv`` / ``privacy.csv``.
"""

from __future__ import annotations

import csv
import json
import math
import socket
import struct
from pathlib import Path

import pytest
import torch

from asyncfl.components import allow
from asyncfl.components.core import Component
from asyncfl.components.registry import REGISTRY, register, unregister
from asyncfl.components.traits import TrackerTraits
from asyncfl.config.base import Section
from asyncfl.config import scenario as sc
from asyncfl.errors import ScenarioError
from asyncfl.run.runner import resume_dir_blocking, run_to_dir_blocking
from asyncfl.run.tracker_base import Tracker
from conftest import make_raw

mlflow = pytest.importorskip("mlflow")
SYNTH = {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "model": "logreg"}


def scenario(trackers, keys=None, private=False, **run) -> sc.Scenario:
    raw = make_raw(**{"task": SYNTH, "population.clients": 40, "run.steps": 12, "run.eval_every": 2,
                      "server.max_staleness": 10, **{f"run.{k}": v for k, v in run.items()}})
    raw["run"]["trackers"] = trackers
    if keys:
        raw["run"]["tracker"] = keys
    if private:
        raw["privacy"] = {"enabled": True, "clip": 1.0, "noise_multiplier": 0.8, "xi": 4.0}
    return sc.validate(raw)


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def evaluations(run: Path) -> dict[int, dict[str, str]]:
    """metrics.csv's rows after step 0 (the step-0 evaluation precedes the first server step)."""
    return {int(r["step"]): r for r in rows(run / "metrics.csv") if int(r["step"]) > 0}


def mlflow_client(store: Path):
    return mlflow.tracking.MlflowClient(tracking_uri=store.as_uri())


def mlflow_keys(store: Path) -> dict:
    return {"mlflow": {"tracking_uri": store.as_uri(), "experiment": "t"}}


@pytest.mark.slow
def test_a_run_in_a_local_mlflow_store(tmp_path):
    store, out = tmp_path / "mlruns", tmp_path / "run"
    run_to_dir_blocking(scenario(["mlflow"], mlflow_keys(store), private=True), out)
    client = mlflow_client(store)
    exp = client.get_experiment_by_name("t")
    (found,) = client.search_runs([exp.experiment_id])
    assert found.info.status == "FINISHED" and found.info.run_name == "run"
    assert found.data.params["server.rule"] == "momentum" and found.data.params["run.steps"] == "12"
    assert found.data.params["privacy.noise_multiplier"] == "0.8"
    evals = evaluations(out)
    for name in ("loss", "accuracy", "train_loss", "staleness_mean", "staleness_max"):
        history = client.get_metric_history(found.info.run_id, name)
        assert sorted(m.step for m in history) == sorted(evals), name  # once per evaluation, against the server step
        for m in history:
            assert m.value == pytest.approx(float(evals[m.step][name]), rel=1e-12), (name, m.step)
    vt = {m.step: m.value for m in client.get_metric_history(found.info.run_id, "virtual_time")}
    assert vt == {s: pytest.approx(float(r["time"])) for s, r in evals.items()}
    curve = {int(r["step"]): r for r in rows(out / "privacy.csv")}
    for name in ("epsilon", "epsilon_client_max"):  # ε and the worst-off client's ε as they grow
        history = {m.step: m.value for m in client.get_metric_history(found.info.run_id, name)}
        assert history == {s: pytest.approx(float(curve[s][name])) for s in evals}
        assert list(history.values()) == sorted(history.values())
    artefacts = {a.path for a in client.list_artifacts(found.info.run_id)}
    assert {"summary.json", "scenario.toml", "components.json"} <= artefacts
    summary = json.loads(Path(client.download_artifacts(found.info.run_id, "summary.json", str(tmp_path / "dl"))).read_text())
    assert summary["status"] == "completed" and summary["steps"] == 12
    assert json.loads((out / "trackers.json").read_text())["mlflow"] == {"run_id": found.info.run_id, "last_step": 12}


@pytest.mark.slow
def test_a_four_point_sweep_is_one_parent_mlflow_run_with_a_child_per_point(tmp_path, capsys):
    from asyncfl.cli.main import main

    store = tmp_path / "mlruns"
    path = tmp_path / "s.toml"
    path.write_text(scenario(["mlflow"], mlflow_keys(store)).to_toml())
    assert main(["sweep", str(path), "--grid", "server.lr=0.5,0.25", "--seeds", "0-1", "--workers", "2",
                 "--out", str(tmp_path / "sw"), "--quiet"]) == 0
    client = mlflow_client(store)
    exp = client.get_experiment_by_name("t").experiment_id
    parents = client.search_runs([exp], filter_string="tags.`asyncfl.sweep` = 'sw'")
    assert len(parents) == 1
    children = client.search_runs([exp], filter_string=f"tags.`mlflow.parentRunId` = '{parents[0].info.run_id}'")
    assert len(children) == 4
    assert sorted((c.data.params["server.lr"], c.data.params["seed"]) for c in children) == [
        ("0.25", "0"), ("0.25", "1"), ("0.5", "0"), ("0.5", "1")]
    for child in children:
        run_dir = Path(child.data.tags["asyncfl.run_dir"])
        assert sorted(m.step for m in client.get_metric_history(child.info.run_id, "loss")) == sorted(evaluations(run_dir))


def _interrupted_then_resumed(sc_: sc.Scenario, out: Path) -> None:
    """Stop the run at step 10 — after its checkpoint at step 8 and after the tracker logged step
    10 — as a second Ctrl-C does (no checkpoint then), then resume it."""
    def at_ten(event):
        if event.step == 10:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        run_to_dir_blocking(sc_, out, on_event=at_ten)
    assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"
    resume_dir_blocking(out)


def test_a_resumed_run_continues_the_same_mlflow_run_without_doubled_points(tmp_path):
    store, out, whole = tmp_path / "mlruns", tmp_path / "run", tmp_path / "whole"
    sc_ = scenario(["mlflow"], mlflow_keys(store), checkpoint_every=4)
    _interrupted_then_resumed(sc_, out)
    client = mlflow_client(store)
    (found,) = client.search_runs([client.get_experiment_by_name("t").experiment_id])
    assert found.info.status == "FINISHED"
    for name in ("loss", "updates_accepted", "staleness_mean"):
        steps = [m.step for m in client.get_metric_history(found.info.run_id, name)]
        assert sorted(steps) == [2, 4, 6, 8, 10, 12], (name, steps)  # step 10 logged before the stop, once
    run_to_dir_blocking(scenario([]), whole)  # the run itself is the run without a tracker
    assert (out / "updates.csv").read_bytes() == (whole / "updates.csv").read_bytes()


class Exploding(Tracker):
    """A tracker that fails at its third evaluation (``run.trackers = ["test_trackers:EXPLODING"]``)."""

    def start(self, start):
        self.calls = 0
        return "x"

    def log(self, step, values):
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("the tracking server went away")


EXPLODING = Component("tracker", "exploding", Exploding, summary="fails at its third evaluation")


@pytest.fixture
def allowed(monkeypatch):
    """Modules allowed for 'module:attribute' trackers in this test only (docs/extending.md §3);
    the trackers registered under such names are unregistered afterwards."""
    monkeypatch.delenv(allow.ENV, raising=False)
    before = set(REGISTRY.names("tracker"))
    yield allow.allow_modules
    allow.reset()
    for name in set(REGISTRY.names("tracker")) - before:
        unregister("tracker", name)


def test_a_tracker_failing_mid_run_never_costs_the_run_its_files(tmp_path, capsys, allowed):
    allowed("test_trackers")
    store, out, plain = tmp_path / "mlruns", tmp_path / "run", tmp_path / "plain"
    s = run_to_dir_blocking(scenario(["test_trackers:EXPLODING", "mlflow"], mlflow_keys(store)), out)
    assert s["status"] == "completed"
    assert s["tracker_errors"] == {"test_trackers:EXPLODING": "RuntimeError: the tracking server went away"}
    assert "tracker test_trackers:EXPLODING failed" in capsys.readouterr().err
    run_to_dir_blocking(scenario([]), plain)
    assert (out / "updates.csv").read_bytes() == (plain / "updates.csv").read_bytes()
    a, b = torch.load(out / "model.pt", weights_only=True), torch.load(plain / "model.pt", weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a)
    client = mlflow_client(store)  # the other tracker logged everything
    (found,) = client.search_runs([client.get_experiment_by_name("t").experiment_id])
    assert len(client.get_metric_history(found.info.run_id, "loss")) == 6


class JSONLKeys(Section):
    """The keys of the tracker ``jsonl``: the file it appends to."""

    file: str


class JSONLines(Tracker):
    """A user's tracker: one JSON line per logged evaluation, and the status at the end."""

    def start(self, start):
        self.path = Path(self.keys.file)
        return None

    def _write(self, row):
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")

    def log(self, step, values):
        self._write({"step": step, **values})

    def finish(self, status):
        self._write({"status": status})


def test_a_users_tracker_is_a_component_registered_and_shown_as_any_other(tmp_path, capsys):
    from asyncfl.cli.main import main

    register(Component("tracker", "jsonl", JSONLines, JSONLKeys, summary="JSON lines"))
    try:
        log, out = tmp_path / "log.jsonl", tmp_path / "run"
        s = scenario(["jsonl"], {"jsonl": {"file": str(log)}})
        (component,) = s.listed("tracker")  # run.trackers is a list of components, each with its own keys
        assert component.name == "jsonl" and component.own_config(s.run) == JSONLKeys(file=str(log))
        with pytest.raises(ScenarioError, match=r"run.tracker.jsonl.file: required key is missing"):
            scenario(["jsonl"])
        run_to_dir_blocking(s, out)
        *points, end = [json.loads(line) for line in log.read_text().splitlines()]
        evals = evaluations(out)
        assert [p["step"] for p in points] == sorted(evals) and end == {"status": "completed"}
        assert all(p["loss"] == pytest.approx(float(evals[p["step"]]["loss"]), rel=1e-12) for p in points)
        (tmp_path / "s.toml").write_text(s.to_toml())
        assert main(["validate", str(tmp_path / "s.toml")]) == 0
        assert "#   run.trackers = 'jsonl': module test_trackers" in capsys.readouterr().out
    finally:
        unregister("tracker", "jsonl")
    with pytest.raises(ValueError, match="tracker 'linked': a tracker is one of a list .run.trackers. and cannot link others"):
        Component("tracker", "linked", JSONLines, JSONLKeys, TrackerTraits(links="file"))


def test_trackers_are_checked_before_anything_is_written(tmp_path, allowed):
    with pytest.raises(ScenarioError) as exc:
        scenario(["mlfow"], {"mlflow": {"tracking_uri": "x"}})
    assert exc.value.problems == [
        "run.trackers = 'mlfow': unknown tracker (a registered name, or 'package.module:attribute' naming an "
        "asyncfl.Component of a module you allow); did you mean 'mlflow'? Allowed: tensorboard, mlflow, wandb",
        "run.tracker.mlflow: keys of a tracker run.trackers does not name (mlfow)"]
    with pytest.raises(ScenarioError, match=r"run.tracker.wandb.mode = 'cloud'"):
        scenario(["wandb"], {"wandb": {"mode": "cloud"}})
    with pytest.raises(ScenarioError, match=r"run.tracker.mlflow.experimnt: unknown key; did you mean 'experiment'"):
        scenario(["mlflow"], {"mlflow": {"experimnt": "x"}})
    with pytest.raises(ScenarioError, match=r"run.tracker.tensorboard: tracker 'tensorboard' takes no keys"):
        scenario(["tensorboard"], {"tensorboard": {"dir": "x"}})
    with pytest.raises(ScenarioError, match=r"'mlflow' named more than once"):
        scenario(["mlflow", "mlflow"])
    with pytest.raises(ScenarioError, match="names code in the module 'os', which asyncfl does not import unless you allow it"):
        scenario(["os:abort"])  # a scenario runs no code the user did not allow
    allowed("conftest")
    with pytest.raises(ScenarioError, match="names a function, not an asyncfl.Component"):
        scenario(["conftest:make_raw"])
    allowed("test_trackers")
    with pytest.raises(ScenarioError, match="names a type, not an asyncfl.Component"):
        scenario(["test_trackers:Exploding"])  # the class is the builder; the component is what a scenario names
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------------------------
# Weights & Biases, offline
def wandb_records(path: Path) -> list:
    """The ``Record`` protobufs of a ``.wandb`` file: a 7-byte header (``:W&B``, magic, version),
    then 32 KiB blocks of chunks (CRC32, length, type: full, first, middle, last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, buf, payloads = 7, 32768, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:
            payloads.append(chunk)
        elif kind == 2:
            buf = chunk
        elif kind == 3:
            buf += chunk
        elif kind == 4:
            payloads.append(buf + chunk)
        else:
            break
    out = []
    for p in payloads:
        record = pb.Record()
        record.ParseFromString(p)
        out.append(record)
    return out


def wandb_history(folder: Path) -> tuple[list[dict], list]:
    """Every history row of every offline run under ``folder`` (a resumed run writes a second
    folder of the same id), and their run records."""
    history, runs = [], []
    for path in sorted(folder.glob("wandb/offline-run-*/run-*.wandb")):
        for record in wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "history":
                history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
            elif kind == "run":
                runs.append(record.run)
    return history, runs


@pytest.fixture
def no_network(monkeypatch):
    """Records every connection this process opens to a non-loopback address (W&B's service
    process is a child; it talks to us over loopback)."""
    opened = []
    real = socket.socket.connect

    def connect(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
            opened.append(address)
        return real(self, address)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    return opened


@pytest.mark.slow
def test_a_run_and_its_resume_in_wandb_offline_files(tmp_path, no_network, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    keys = {"wandb": {"dir": str(tmp_path), "project": "p"}}
    out = tmp_path / "run"
    _interrupted_then_resumed(scenario(["wandb"], keys, private=True, checkpoint_every=4), out)
    history, runs = wandb_history(tmp_path)
    assert {r.run_id for r in runs} == {json.loads((out / "trackers.json").read_text())["wandb"]["run_id"]}
    steps = [h["server_step"] for h in history]
    assert sorted(steps) == [2, 4, 6, 8, 10, 12]  # no doubled points
    evals, curve = evaluations(out), {int(r["step"]): r for r in rows(out / "privacy.csv")}
    for h in history:
        s = h["server_step"]
        assert h["loss"] == pytest.approx(float(evals[s]["loss"]), rel=1e-12)
        assert h["accuracy"] == pytest.approx(float(evals[s]["accuracy"]), rel=1e-12)
        assert h["epsilon"] == pytest.approx(float(curve[s]["epsilon"]))
    config = {i.key: json.loads(i.value_json) for i in runs[0].config.update}
    server = config["server"].get("value", config["server"])
    assert server["rule"] == "momentum" and server["lr"] == 0.5
    saved = {p.name for p in tmp_path.glob("wandb/offline-run-*/files/*")}
    assert {"summary.json", "scenario.toml"} <= saved
    assert no_network == [], no_network


def test_tensorboard_is_a_tracker_too(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    run_to_dir_blocking(scenario(["tensorboard"]), out)
    acc = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    evals = evaluations(out)
    assert [e.step for e in acc.Scalars("eval/loss")] == sorted(evals)
    assert all(math.isclose(e.value, float(evals[e.step]["loss"]), rel_tol=1e-6) for e in acc.Scalars("eval/loss"))


@pytest.mark.slow
def test_a_four_point_sweep_in_wandb_offline_files_is_one_group(tmp_path, no_network, monkeypatch, capsys):
    pytest.importorskip("wandb")
    from asyncfl.cli.main import main

    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    path = tmp_path / "s.toml"
    path.write_text(scenario(["wandb"], {"wandb": {"dir": str(tmp_path), "project": "p"}}).to_toml())
    assert main(["sweep", str(path), "--grid", "server.lr=0.5,0.25", "--seeds", "0-1", "--workers", "1",
                 "--out", str(tmp_path / "sw"), "--quiet"]) == 0
    history, runs = wandb_history(tmp_path)
    assert len({r.run_id for r in runs}) == 4 and {r.run_group for r in runs} == {"sw"}
    assert {r.job_type for r in runs} == {"point"}
    assert sorted(h["server_step"] for h in history) == sorted([2, 4, 6, 8, 10, 12] * 4)
    assert no_network == [], no_network
