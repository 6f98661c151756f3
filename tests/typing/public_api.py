"""Uses of asyncfl's public API as a user writes them; ``mypy --strict`` must accept this file
(tests/test_public_api.py)."""

from __future__ import annotations

from typing import NamedTuple

import torch

import asyncfl
from asyncfl import Aggregate, Component, RuleOutput, RuleTraits, Section, ServerRule


class GainConfig(Section):
    gain: float = 2.0


class GainState(NamedTuple):
    steps: int


class Gain(ServerRule):
    def __init__(self, gain: float) -> None:
        self.gain = gain

    @classmethod
    def from_config(cls, cfg: GainConfig) -> Gain:
        return cls(cfg.gain)

    def init(self, theta: torch.Tensor) -> GainState:
        return GainState(0)

    def direction(self, aggregate: Aggregate, state: GainState) -> RuleOutput:
        return RuleOutput(self.gain * aggregate.r, GainState(state.steps + 1))


GAIN: Component = Component("rule", "gain", Gain.from_config, GainConfig, RuleTraits(own_bias=None), state=(GainState,))


def main() -> float:
    registered: list[Component] = asyncfl.register(GAIN)
    scenario: asyncfl.Scenario = asyncfl.load_scenario("scenarios/quickstart.toml", ["server.rule=\"gain\""])
    run = asyncfl.simulate(scenario, out="runs/gain")
    final: float = float(run.summary["final"]["accuracy"])
    assert registered[0].name == "gain"
    return final
