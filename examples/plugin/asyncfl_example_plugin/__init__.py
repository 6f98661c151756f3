"""A worked asyncfl plug-in (docs/extending.md): five components, declared here, torch-free.

* task ``blob-cnn``: a small CNN on a data set the user keeps on disk (``task.path``, an ``.npz``
  with a natural per-writer split: ``make_data.py`` writes one);
* server rule ``clipped-momentum``: heavy ball on the aggregate clipped to norm ``clip_tau``
  (a hyper-parameter) with its own state type;
* latency model ``weibull``: ``scale × Weibull(shape)``;
* local solver ``clipped-sgd``: SGD whose every gradient is clipped to norm ``grad_clip``;
* protocol ``deadline``: FedBuff whose uploads that trained longer than ``server.deadline`` are
  dropped with a reason it declares (``"deadline"``).

Builders have asyncfl's one shape, ``build(cfg, ctx)``, and are ``"module:attribute"`` strings,
so asyncfl imports torch-using code only when a scenario names one of them.
"""

from asyncfl import Component, LatencyTraits, ProtocolTraits, RuleTraits, SolverTraits, TaskTraits

from asyncfl_example_plugin.config import (
    BlobCNNTask, ClippedMomentumConfig, ClippedSGDConfig, DeadlineConfig, WeibullLatency,
)
from asyncfl_example_plugin.protocol import resolve  # torch-free, like this module

COMPONENTS = (
    Component("task", "blob-cnn", "asyncfl_example_plugin.task:build", BlobCNNTask, TaskTraits(),
              summary="a CNN on 8×8 images read from task.path, one client per writer"),
    Component("rule", "clipped-momentum", "asyncfl_example_plugin.rule:ClippedMomentum.from_config",
              ClippedMomentumConfig, RuleTraits(own_bias=None),
              state=("asyncfl_example_plugin.rule:ClippedTrace",),
              summary="heavy ball on the aggregate clipped to norm clip_tau"),
    Component("latency", "weibull", "asyncfl_example_plugin.latency:build", WeibullLatency, LatencyTraits(mode="draw"),
              summary="scale × Weibull(shape)"),
    Component("solver", "clipped-sgd", "asyncfl_example_plugin.solver:build", ClippedSGDConfig,
              SolverTraits(batched=False), summary="SGD with every gradient clipped to norm grad_clip"),
    Component("protocol", "deadline", "asyncfl_example_plugin.protocol:DeadlineProtocol", DeadlineConfig,
              ProtocolTraits(in_flight_key="concurrency", stale=True, drops=("deadline",), resolve=resolve),
              state=("asyncfl_example_plugin.protocol:DeadlineState",),
              summary="FedBuff whose uploads that trained longer than server.deadline are dropped"),
)
