"""Composed server rules (docs/server-rules.md §10): the global-norm clip and the chain.

* the chain's directions equal a hand loop over the steps (numpy, float64) for clip → momentum,
  clip → Nesterov and momentum → clip, to 1e-12;
* the example plug-in's hand-written ``clipped-momentum`` and ``chain = ["clip", "momentum"]``
  give the same directions step by step, and the same run (updates, model) to 1e-12;
* the chain's state is the tuple of its links' states: it survives a checkpoint exactly, and a
  run of a chain resumes to the uninterrupted run's files;
* the chain's traits are derived from its links' (own_bias, target, coefficients);
* bad chains are refused naming the field; a sweep varies a chain's keys.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import tomli_w
import torch

from asyncfl.cli.main import main
from asyncfl.components.builtin import _chain_traits
from asyncfl.components.registry import register, unregister
from asyncfl.components.traits import MemoryShape
from asyncfl.config import scenario as sc
from asyncfl.config.registries import RULES
from asyncfl.errors import ScenarioError
from asyncfl.run.bias_report import own_bias
from asyncfl.run.runner import run_to_dir_blocking
from asyncfl.server.aggregation import Aggregate
from asyncfl.server.chain import Chain, ChainState, Clip, clip_by_norm
from asyncfl.compose import build_rule as make_rule
from asyncfl.server.ma import MALight
from asyncfl.server.rules import Momentum, Nesterov, TraceState

from conftest import make_scenario, through_file, whole_and_resumed

PLUGIN = Path(__file__).resolve().parents[1] / "examples" / "plugin"
CHAIN = {"server.rule": "chain", "server.chain": ["clip", "momentum"], "server.clip_tau": 0.3, "server.beta": 0.7}


def _sequence(steps: int = 30, dim: int = 6, seed: int = 0) -> list[torch.Tensor]:
    """Aggregates whose norms straddle τ = 1: about half are clipped."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(dim, generator=g, dtype=torch.float64) * (0.2 + 0.4 * (t % 5)) / math.sqrt(dim)
            for t in range(steps)]


def _directions(rule, rs, weights=np.ones(1)):
    state, out = rule.init(torch.zeros_like(rs[0])), []
    for t, r in enumerate(rs, start=1):
        res = rule.direction(Aggregate(t, r, weights), state)
        out.append(res.direction)
        state = res.state
    return torch.stack(out), state


def _clip(r: np.ndarray, tau: float) -> np.ndarray:
    norm = math.sqrt(sum(x * x for x in r))  # ‖r‖₂ by a plain sum
    return r * (tau / norm) if norm > tau else r


# -- the maths against a hand loop ---------------------------------------------------------------
@pytest.mark.parametrize("tau,beta", [(1.0, 0.9), (0.4, 0.5)])
def test_clip_then_momentum_is_heavy_ball_on_the_clipped_aggregates(tau, beta):
    rs = _sequence()
    ours, _ = _directions(Chain((Clip(tau), Momentum(beta))), rs)
    m, expected, clipped = np.zeros(rs[0].numel()), [], 0
    for r in rs:
        c = _clip(r.numpy(), tau)
        clipped += not np.array_equal(c, r.numpy())
        m = beta * m + c  # m_t = β m_{t−1} + clip(r_t, τ), m_0 = 0
        expected.append(m.copy())
    assert 5 <= clipped <= len(rs) - 5  # both branches of the clip are exercised
    np.testing.assert_allclose(ours.numpy(), np.array(expected), rtol=0, atol=1e-12)


def test_clip_then_nesterov_and_momentum_then_clip_against_hand_loops():
    tau, beta, rs = 0.5, 0.8, _sequence(seed=1)
    nest, _ = _directions(Chain((Clip(tau), Nesterov(beta))), rs)
    after, _ = _directions(Chain((Momentum(beta), Clip(tau))), rs)
    h, want_nest, want_after = np.zeros(rs[0].numel()), [], []
    for r in rs:
        c = _clip(r.numpy(), tau)
        h = beta * h + c
        want_nest.append(c + beta * h)  # Nesterov's look-ahead on the clipped aggregate
    h = np.zeros(rs[0].numel())
    for r in rs:
        h = beta * h + r.numpy()
        want_after.append(_clip(h, tau))  # the momentum buffer unclipped, the direction clipped
    np.testing.assert_allclose(nest.numpy(), np.array(want_nest), rtol=0, atol=1e-12)
    np.testing.assert_allclose(after.numpy(), np.array(want_after), rtol=0, atol=1e-12)
    assert max(float(np.linalg.norm(d)) for d in after.numpy()) <= tau * (1 + 1e-12)


def test_clip_leaves_short_vectors_and_zero_alone_and_rescales_long_ones_to_tau():
    r = torch.tensor([3.0, 4.0], dtype=torch.float64)  # ‖r‖ = 5
    assert torch.equal(clip_by_norm(r, 5.0), r) and torch.equal(clip_by_norm(r, 7.0), r)
    torch.testing.assert_close(clip_by_norm(r, 2.5), torch.tensor([1.5, 2.0], dtype=torch.float64), rtol=0, atol=1e-15)
    zero = torch.zeros(3, dtype=torch.float64)
    assert torch.equal(clip_by_norm(zero, 1.0), zero)


def test_a_chain_of_one_link_is_that_link_bit_for_bit():
    rs = _sequence(seed=2)
    for link in (Momentum(0.6), Nesterov(0.6)):
        assert torch.equal(_directions(Chain((link,)), rs)[0], _directions(link, rs)[0])


def test_the_chain_passes_on_the_coefficients_of_its_recording_link():
    rs, weights = _sequence(steps=8, seed=3), np.array([0.5, 0.3, 0.2])
    light = MALight(0.9, "momentum")
    chain = Chain((Clip(10.0), light), record=1)  # τ = 10: nothing is clipped
    state_c, state_l = chain.init(rs[0]), light.init(rs[0])
    for t, r in enumerate(rs, start=1):
        a, b = chain.direction(Aggregate(t, r, weights), state_c), light.direction(Aggregate(t, r, weights), state_l)
        assert torch.equal(a.direction, b.direction) and np.array_equal(a.coefficients, b.coefficients)
        state_c, state_l = a.state, b.state


# -- the example's hand-written clipped momentum, as a chain ---------------------------------------
@pytest.fixture
def example_plugin():
    """The example plug-in's components, registered in this process (as ``asyncfl.register`` does)."""
    sys.path.insert(0, str(PLUGIN))
    try:
        from asyncfl_example_plugin import COMPONENTS
        registered = register(*COMPONENTS)
        yield COMPONENTS
    finally:
        for c in locals().get("registered", ()):
            unregister(c.kind, c.name)
        sys.path.remove(str(PLUGIN))


def test_the_example_clipped_momentum_equals_the_chain_step_by_step(example_plugin):
    from asyncfl_example_plugin.rule import ClippedMomentum

    rs = _sequence(steps=40, seed=4)
    hand, state = _directions(ClippedMomentum(0.8, 0.5), rs)
    chained, _ = _directions(Chain((Clip(0.5), Momentum(0.8))), rs)
    assert 0 < state.clipped < len(rs)
    torch.testing.assert_close(chained, hand, rtol=0, atol=1e-12)


def test_the_example_clipped_momentum_and_the_chain_give_the_same_run(example_plugin, tmp_path):
    """The scenario's rule switched from the plug-in's ``clipped-momentum`` to the chain of the
    built-in ``clip`` and ``momentum`` (same ``beta``, same ``clip_tau``): same updates, same
    model to 1e-12, and the clip was active."""
    keys = {"server.beta": 0.7, "server.clip_tau": 0.05, "server.lr": 0.8, "run.steps": 30, "run.eval_every": 10}
    hand = make_scenario({**keys, "server.rule": "clipped-momentum"})
    chain = hand.replace(**{"server.rule": "chain", "server.chain": ["clip", "momentum"]})
    assert chain.config_of("rule").clip_tau == 0.05 and chain.config_of("rule").beta == 0.7
    run_to_dir_blocking(hand, tmp_path / "hand")
    run_to_dir_blocking(chain, tmp_path / "chain")
    assert (tmp_path / "hand" / "updates.csv").read_bytes() == (tmp_path / "chain" / "updates.csv").read_bytes()
    a, b = (torch.load(tmp_path / d / "model.pt", weights_only=True) for d in ("hand", "chain"))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-12)
    unclipped = hand.replace(**{"server.rule": "momentum"})  # drops clip_tau
    run_to_dir_blocking(unclipped, tmp_path / "momentum")
    c = torch.load(tmp_path / "momentum" / "model.pt", weights_only=True)
    assert any(not torch.allclose(a[k], c[k], rtol=0, atol=1e-6) for k in a)  # τ = 0.05 changed the run


# -- state, checkpoints, resume --------------------------------------------------------------------
def test_the_chain_state_is_its_links_states_and_survives_a_checkpoint():
    rule = make_rule(make_scenario(CHAIN))
    rs = _sequence(steps=10, seed=5)
    _, state = _directions(rule, rs[:6])
    assert isinstance(state, ChainState) and isinstance(state.links[1], TraceState) and state.links[1].started
    back = through_file(state)
    assert type(back) is ChainState and torch.equal(back.links[1].trace, state.links[1].trace)
    go_on = []
    for start in (state, back):
        s, out = start, []
        for t, r in enumerate(rs[6:], start=7):
            res = rule.direction(Aggregate(t, r, np.ones(1)), s)
            out.append(res.direction)
            s = res.state
        go_on.append(torch.stack(out))
    assert torch.equal(go_on[0], go_on[1])


def test_a_chained_run_resumes_to_the_uninterrupted_files(tmp_path):
    whole_and_resumed(make_scenario({**CHAIN, "run.checkpoint_every": 4}), tmp_path)


def test_a_chain_is_pure_unless_a_link_writes_in_place():
    assert not make_rule(make_scenario(CHAIN)).in_place_state
    full = make_rule(make_scenario({"server.rule": "chain", "server.chain": ["clip", "ma-full"]}))
    assert full.in_place_state


# -- traits derived from the links -----------------------------------------------------------------
@pytest.mark.parametrize("links,own,target,coefficients", [
    (["momentum"], "momentum", "momentum", None),
    (["sgd", "nesterov"], "momentum", "nesterov", None),  # the identity link changes nothing
    (["sgd"], "none", "momentum", None),
    (["clip", "momentum"], None, "momentum", None),  # the clip is not linear in the aggregates
    (["momentum", "clip"], None, "momentum", None),
    (["adam"], None, "momentum", None),
    (["ma-light"], "ma_light", "momentum", "pair"),
    (["clip", "ma-full"], None, "momentum", "full"),  # records MA-full's a_t, but has no bias row
])
def test_the_chain_traits_derive_from_its_links(links, own, target, coefficients):
    traits = make_scenario({"server.rule": "chain", "server.chain": links}).component("rule").traits
    assert (traits.own_bias, traits.target, traits.coefficients) == (own, target, coefficients)


def test_two_linear_links_that_are_not_the_identity_have_no_bias_row():
    """Linear, but the product of two weight matrices (M_nest M_mom) is no row of bias.json (two
    built-in momentum links share ``beta``, so the derivation is asked directly)."""
    traits = _chain_traits((RULES.get("momentum"), RULES.get("nesterov")))
    assert traits.own_bias is None and _chain_traits((RULES.get("sgd"), RULES.get("nesterov"))).own_bias == "momentum"


def test_a_clipped_chain_reports_no_own_bias_and_a_plain_one_reports_its_link(tmp_path):
    bias = {"none": 0.1, "momentum": 0.2, "ma_full": 0.3, "ma_light": 0.4}
    assert math.isnan(own_bias(make_scenario(CHAIN), bias))
    assert own_bias(make_scenario({"server.rule": "chain", "server.chain": ["sgd", "momentum"]}), bias) == 0.2


def test_the_chain_memory_and_checks_are_its_links():
    plain = make_scenario({"server.rule": "ma-full", "run.steps": 500})
    chained = make_scenario({"server.rule": "chain", "server.chain": ["clip", "ma-full"], "run.steps": 500})
    shape = MemoryShape(params=5, itemsize=8, clients=30, steps=500, in_flight=8)
    want = plain.component("rule").traits.memory(plain.config_of("rule"), shape)
    got = chained.component("rule").traits.memory(chained.config_of("rule"), shape)
    assert got == want and want


# -- validation --------------------------------------------------------------------------------------
@pytest.mark.parametrize("changes,message", [
    ({"server.chain": ["clip", "momentun"]}, "server.chain: unknown server rule 'momentun'; did you mean 'momentum'?"),
    ({"server.chain": ["clip", "chain"]}, "server.chain: 'chain' links others itself; a chain of chains is the chain of their links"),
    ({"server.chain": ["momentum", "momentum"]}, "server.chain: 'momentum' is listed 2 times; each link appears once"),
    ({"server.chain": ["momentum", "adam"]}, "server.beta: declared by both the link 'momentum' of server.chain and the link 'adam'"),
    ({"server.chain": ["momentum"]}, "server.clip_tau: unknown key"),
    ({"server.chain": "clip"}, "server.chain = 'clip': must be an array of server rule names"),
    ({"server.chain": []}, "server.chain = []: must be an array of server rule names"),
    ({"server.chain": None}, "server.chain: required with server.rule = 'chain'"),
    ({"server.chain": ["sgd"] * 10**6}, "server.chain: 1000000 names; at most 16 links"),
    ({"server.rule": "momentum", "server.clip_tau": None}, "server.chain: unknown key"),
])
def test_bad_chains_are_refused_naming_the_field(changes, message):
    with pytest.raises(ScenarioError) as err:
        make_scenario({**CHAIN, **changes})
    assert any(p.startswith(message) for p in err.value.problems), err.value.problems


def test_a_key_of_a_link_the_chain_does_not_list_says_how_to_link_it():
    with pytest.raises(ScenarioError) as err:
        make_scenario({**CHAIN, "server.chain": ["momentum"]})
    (problem,) = err.value.problems
    assert problem.endswith("(a key of server.rule = 'clip': list it in server.chain to link it)")


def test_switching_away_from_a_chain_drops_its_links_keys_with_a_note():
    raw = sc.validate(make_scenario(CHAIN).to_dict()).to_dict()
    notes = sc.apply_changes(raw, ["server.rule=momentum"])
    assert notes == ["note: server.rule 'chain' → 'momentum': dropped the file's server.chain, server.clip_tau (chain only)"]
    assert sc.validate(raw).server.beta == 0.7
    raw = make_scenario(CHAIN).to_dict()
    notes = sc.apply_changes(raw, ['server.chain=["momentum"]'])
    assert notes == ["note: server.chain ['clip', 'momentum'] → ['momentum']: dropped the file's server.clip_tau "
                     "(keys of links no longer listed)"]
    assert sc.validate(raw).config_of("rule").links[0].name == "momentum"


# -- a sweep over a chain's keys ---------------------------------------------------------------------
def test_a_sweep_varies_a_chains_keys(tmp_path):
    path = tmp_path / "chain.toml"
    raw = make_scenario({**CHAIN, "run.steps": 6, "run.eval_every": 3}).to_dict()
    path.write_text(tomli_w.dumps(raw))
    out = tmp_path / "sweep"
    assert main(["sweep", str(path), "--grid", "server.clip_tau=0.01,100", "--grid", "server.beta=0.0,0.7",
                 "--seeds", "0", "--out", str(out), "--workers", "1", "--quiet"]) == 0
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert len(rows) == 4 and {r["status"] for r in rows} == {"completed"}
    for row in rows:
        alone = tmp_path / "alone" / row["name"]
        run_to_dir_blocking(sc.load(path, [f"server.clip_tau={row['server.clip_tau']}", f"server.beta={row['server.beta']}",
                                           "seed=0"]), alone)
        a = torch.load(alone / "model.pt", weights_only=True)
        b = torch.load(out / row["run_dir"] / "model.pt", weights_only=True)
        assert all(torch.equal(a[k], b[k]) for k in a)
    models = {row["name"]: torch.load(out / row["run_dir"] / "model.pt", weights_only=True) for row in rows}
    assert len({tuple(torch.cat([v.flatten() for v in m.values()]).tolist()) for m in models.values()}) == 4


@pytest.mark.slow
def test_the_example_scenario_runs_the_same_with_its_rule_written_as_a_chain(example_plugin, tmp_path):
    """examples/plugin/scenario.toml as shipped (its CNN task on its own data, Weibull latencies,
    clipped SGD) and with ``rule = "chain"``, ``chain = ["clip", "momentum"]``: the same updates,
    and the same model to float32 round-off. The CNN is float32, and the built-in momentum forms
    ``r + β h`` in one ``torch.add(…, alpha=β)`` where the example writes ``β h + r``: the last bit
    may differ (1.2e-7 at most after the 60 steps, measured); the float64 run above agrees to
    1e-12."""
    from asyncfl_example_plugin.make_data import make

    make(str(tmp_path / "blobs.npz"))
    (tmp_path / "scenario.toml").write_text((PLUGIN / "scenario.toml").read_text())
    hand = sc.load(tmp_path / "scenario.toml")
    chain = sc.load(tmp_path / "scenario.toml", ["server.rule=chain", 'server.chain=["clip", "momentum"]'])
    for name, scenario in (("hand", hand), ("chain", chain)):
        run_to_dir_blocking(scenario, tmp_path / name)
    assert (tmp_path / "hand" / "updates.csv").read_bytes() == (tmp_path / "chain" / "updates.csv").read_bytes()
    a, b = (torch.load(tmp_path / d / "model.pt", weights_only=True) for d in ("hand", "chain"))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-6)


def test_the_run_records_each_links_origin_and_a_changed_one_is_named(tmp_path):
    from asyncfl.run import provenance

    scenario = make_scenario({**CHAIN, "run.steps": 3})
    run_to_dir_blocking(scenario, tmp_path / "run")
    recorded = provenance.read(tmp_path / "run")
    (rule,) = [e for e in recorded["components"] if e["kind"] == "rule"]
    assert rule["name"] == "chain" and [(link["field"], link["name"], link["origin"]["source"]) for link in rule["links"]] == [
        ("server.chain", "clip", "builtin"), ("server.chain", "momentum", "builtin")]
    assert provenance.problems(recorded, scenario, None) == []
    rule["links"][1]["origin"] = {"source": "package", "module": "mylab", "package": "mylab", "version": "1.0"}
    assert provenance.problems(recorded, scenario, None) == [
        "server.chain link 'momentum': the run used it from package mylab 1.0, now it comes from built into asyncfl"]
    rule["links"][1]["name"] = "nesterov"
    assert provenance.problems(recorded, scenario, None) == [
        "server.chain: the run linked ['clip', 'nesterov'], the scenario now links ['clip', 'momentum']"]
