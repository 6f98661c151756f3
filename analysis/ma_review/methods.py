"""The methods a review cell can compare (docs/ma-review.md §2; docs/server-rules.md,
docs/async-optimisers.md): their names, labels, the scenario keys that make each one, and which
entry of a run's ``bias.json`` is its own rule's.

=====================  ==============================================================
``fedbuff-sgd``        FedBuff, ``server.rule = "sgd"``
``fedbuff-momentum``   FedBuff, naive server momentum (heavy ball, β)
``fedbuff-nesterov``   FedBuff, naive Nesterov (β)
``fedbuff-ma-full``    FedBuff, MA-full approximating ``ma_target`` (default momentum)
``fedbuff-ma-light``   FedBuff, MA-light approximating ``ma_target``
``sync-momentum``      synchronous FedAvg with server momentum, cohort = C (no staleness;
                       does not depend on K: a cell runs it once, at ``K = C``)
``fedbuff-fadas``      FedBuff, FADAS (AMSGrad with the delay-adaptive step, β₁ = β;
                       docs/async-optimisers.md §3)
``fedbuff-ca2fl``      FedBuff, CA2FL's cached-update calibration with the plain step
                       (``server.algorithm = "ca2fl"``, ``rule = "sgd"``, staleness exponent
                       0 as CA2FL requires; not private; docs/async-optimisers.md §4)
``fedbuff-sgd-delay``  FedBuff, the delay-adaptive step ``min(1, κ/τ_max)``
                       (docs/async-optimisers.md §2)
=====================  ==============================================================

The ``bias`` column of ``results.csv`` is the implicit momentum bias ``‖AW − M‖_F/‖M‖_F`` of the
run's own rule, read from its ``bias.json`` (computed on the exact W) under :data:`BIAS_KEY`:
``none`` (W against I) for SGD — its target is M = I; ``momentum`` (A = M) for momentum; for
Nesterov the analysis takes the rule's declared target, so its ``momentum`` entry is naive
Nesterov's bias against the Nesterov M; ``ma_full`` /
``ma_light`` for the MA rules (against ``ma_target``'s M). Sync runs have W = I exactly and use
A = M, so their bias is 0. FADAS and the delay-adaptive step have no linear target: their bias
and amplification are blank (NaN, :data:`NO_BIAS`); CA2FL's rule is SGD, so its row is SGD's
(W against I), measured on the uncalibrated W the rule receives.
"""

from __future__ import annotations

from typing import Any, Literal

MethodName = Literal[
    "fedbuff-sgd", "fedbuff-momentum", "fedbuff-nesterov", "fedbuff-ma-full", "fedbuff-ma-light", "sync-momentum",
    "fedbuff-fadas", "fedbuff-ca2fl", "fedbuff-sgd-delay",
]
METHOD_LABELS = {
    "fedbuff-sgd": "FedBuff + SGD", "fedbuff-momentum": "FedBuff + momentum", "fedbuff-nesterov": "FedBuff + Nesterov",
    "fedbuff-ma-full": "FedBuff + MA-full", "fedbuff-ma-light": "FedBuff + MA-light", "sync-momentum": "sync FedAvg + momentum",
    "fedbuff-fadas": "FedBuff + FADAS", "fedbuff-ca2fl": "FedBuff + CA2FL", "fedbuff-sgd-delay": "FedBuff + delay-adaptive SGD",
}
#: bias.json key holding the bias of each method's own rule (see the module docstring; None: sync, bias 0)
BIAS_KEY = {
    "fedbuff-sgd": "none", "fedbuff-momentum": "momentum", "fedbuff-nesterov": "momentum",
    "fedbuff-ma-full": "ma_full", "fedbuff-ma-light": "ma_light", "sync-momentum": None,
    "fedbuff-ca2fl": "none",
}
#: methods without a linear target: no bias, no amplification (NaN in results.csv)
NO_BIAS = ("fedbuff-fadas", "fedbuff-sgd-delay")
#: the server rule of each FedBuff method
_RULE = {"fedbuff-sgd": "sgd", "fedbuff-momentum": "momentum", "fedbuff-nesterov": "nesterov", "fedbuff-ma-full": "ma-full",
         "fedbuff-ma-light": "ma-light", "fedbuff-fadas": "fadas", "fedbuff-ca2fl": "sgd", "fedbuff-sgd-delay": "sgd-delay"}


def method_overrides(method: str, buffer: int, ma_target: str) -> dict[str, Any]:
    """The scenario keys (dotted) that make a run of ``method``; ``None`` removes a key. Sync
    momentum takes a cohort of ``buffer`` clients; the FedBuff methods name their rule and the
    target ``M`` of the MA rules (a key only the MA rules own: the scenario drops it for the others)."""
    if method == "sync-momentum":
        return {"server.protocol": "sync", "server.rule": "momentum", "server.concurrency": None, "server.cohort": buffer}
    target = "nesterov" if method == "fedbuff-nesterov" else ma_target
    out: dict[str, Any] = {"server.protocol": "fedbuff", "server.rule": _RULE[method], "server.ma_target": target,
                           "server.cohort": None}
    if method == "fedbuff-ca2fl":  # CA2FL calibrates with unweighted updates: p = 0 (docs/async-optimisers.md §4)
        out.update({"server.algorithm": "ca2fl", "server.staleness_exponent": 0.0})
    return out
