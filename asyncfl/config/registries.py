"""Every registry of plug-ins: one per kind, keyed by the name a scenario uses
(docs/architecture.md, "Registries").

Each kind is written down once, here. The scenario (:mod:`asyncfl.config.scenario`) takes its
allowed values from these tables — ``Literal[RULES.names]`` for a plain key, the registry itself
for the tag of a tagged section — so an unknown name is answered with exactly the names that
exist, and the code that builds a plug-in (``make_rule``, ``build_task``, ``make_executor``,
``postprocess_counts``, ``epsilon_spent``, the privacy builder, the fleet's latency sampler) looks
it up in the same table. Targets are ``"module:attribute"`` strings imported on first :meth:`Registry.load`, so
this module imports neither torch nor any implementation: only the torch-free pydantic classes of
the tagged sections' variants (:mod:`asyncfl.config.latency`, :mod:`asyncfl.config.tasks`).

What each registry holds (scenario key → what a target is):

* :data:`RULES` (``server.rule``): a class with ``from_config(server)``, ``init(θ)`` and
  ``direction(aggregate, state)`` (docs/server-rules.md).
* :data:`ALGORITHMS` (``server.algorithm``): ``build(scenario, task, aggregator, rule) -> Algorithm``
  (docs/baselines.md).
* :data:`PROTOCOLS` (``server.protocol``): a protocol class, built as ``Protocol(sim)``
  (docs/protocol.md).
* :data:`LATENCIES` (``latency.dist``): ``draw(cfg, rng) -> float``
  (:mod:`asyncfl.clients.latency`); config class: the ``[latency]`` variant (docs/protocol.md).
* :data:`TASKS` (``task.name``): ``build(cfg, num_clients, seed) -> Task``; config class: the
  ``[task]`` variant (docs/tasks.md).
* :data:`EXECUTORS` (``run.executor``): ``build(task, client_cfg, run_cfg, scenario) -> Executor``
  (docs/architecture.md).
* :data:`ACCOUNTANTS` (``privacy.accountant``): ``epsilon(releases, σ, δ) -> float`` for the
  :class:`~asyncfl.privacy.accountants.Releases` a run makes about one client (docs/privacy.md §4).
* :data:`SAMPLINGS` (``privacy.sampling``): a sampling assumption — what the reported ε rests on
  — with ``releases(shape)`` (what is accounted), ``cap(shape)`` (the participation cap the
  engine enforces, or None) and the statement a run prints (docs/privacy.md §5–6).
* :data:`COUNT_MODES` (``privacy.counts``): ``postprocess(ĉ, C) -> ndarray`` on one row of noisy
  staleness counts (docs/privacy.md).
"""

from __future__ import annotations

from asyncfl.config import datasets as ds
from asyncfl.config import latency as lat
from asyncfl.config import tasks as tk
from asyncfl.registry import Registry

# -- server rules (docs/server-rules.md) ------------------------------------------------------
RULES: Registry = Registry("server rule", "server.rule", {
    "sgd": ("asyncfl.server.rules:SGD", "m_t = r_t"),
    "momentum": ("asyncfl.server.rules:Momentum", "heavy ball: m_t = β m_{t−1} + r_t"),
    "nesterov": ("asyncfl.server.rules:Nesterov", "Nesterov momentum: m_t = r_t + β h_t"),
    "adam": ("asyncfl.server.rules:Adam", "Adam on r_t, bias-corrected moments"),
    "ma-full": ("asyncfl.server.ma:MAFull", "momentum approximation: least-squares weights over the history"),
    "ma-light": ("asyncfl.server.ma:MALight", "momentum approximation: one buffer, two fitted coefficients"),
})

# -- server algorithms (docs/baselines.md) ----------------------------------------------------
ALGORITHMS: Registry = Registry("server algorithm", "server.algorithm", {
    "fedavg": ("asyncfl.server.algorithms:build_pseudo_gradient", "pseudo-gradient r_t through the server rule"),
    "fedprox": ("asyncfl.server.algorithms:build_pseudo_gradient", "FedAvg with the proximal term (μ/2)‖θ − centre‖²"),
    "fedsplit": ("asyncfl.server.splitting:build_fedsplit", "FedSplit: Peaceman–Rachford splitting"),
    "feddr": ("asyncfl.server.splitting:build_feddr", "FedDR: Douglas–Rachford splitting, optional server regulariser"),
    "fedpd": ("asyncfl.server.splitting:build_fedpd", "FedPD: primal-dual, randomly skipped communication"),
})

# -- protocols (docs/protocol.md) -------------------------------------------------------------
PROTOCOLS: Registry = Registry("protocol", "server.protocol", {
    "fedbuff": ("asyncfl.sim.protocols:FedBuffProtocol", "K clients train at a time, the server steps every C uploads"),
    "sync": ("asyncfl.sim.protocols:SyncProtocol", "rounds: a cohort is sampled, the first C arrivals are accepted"),
})

# -- latency models (docs/protocol.md): [latency] dist -----------------------------------------
LATENCIES: Registry = Registry("latency model", "latency.dist", {
    "constant": ("asyncfl.clients.latency:constant", "value", lat.ConstantLatency),
    "exponential": ("asyncfl.clients.latency:exponential", "Exponential(mean)", lat.ExponentialLatency),
    "halfnormal": ("asyncfl.clients.latency:halfnormal", "|N(0, scale²)|", lat.HalfNormalLatency),
    "lognormal": ("asyncfl.clients.latency:lognormal", "median · exp(σ z)", lat.LogNormalLatency),
    "uniform": ("asyncfl.clients.latency:uniform", "Uniform(low, high)", lat.UniformLatency),
    "pareto": ("asyncfl.clients.latency:pareto", "scale · (1 + Lomax(shape)), heavy-tailed", lat.ParetoLatency),
    "trace": ("asyncfl.clients.latency:trace", "replay an earlier run's updates.csv (not drawn)", lat.TraceLatency),
    "fedscale": ("asyncfl.clients.latency:fedscale", "FedScale device profiles, fixed per client (not drawn)", lat.FedScaleLatency),
})

# -- tasks (docs/tasks.md): [task] name --------------------------------------------------------
TASKS: Registry = Registry("task", "task.name", {
    "quadratic": ("asyncfl.tasks.quadratic:build_quadratic", "least squares ½‖A_k θ − b_k‖²", tk.QuadraticTask),
    "synthetic": ("asyncfl.tasks.synthetic:build_synthetic", "FedProx Synthetic(α, β)", tk.SyntheticTask),
    "digits": ("asyncfl.tasks.digits:build_digits", "scikit-learn 8×8 digits, Dirichlet non-IID", tk.DigitsTask),
    "gaussian-mlp": ("asyncfl.tasks.gaussian_mlp:build_gaussian_mlp", "Gaussian inputs, one-hidden-layer MLP", tk.GaussianMLPTask),
    "mnist1d": ("asyncfl.tasks.mnist1d:build_mnist1d", "the canonical MNIST-1D (mnist1d package), Dirichlet non-IID", tk.MNIST1DTask),
    # read from the user's disk (asyncfl.datasets; docs/tasks.md §13–17) and the offline FEMNIST twin (§18)
    "femnist": ("asyncfl.tasks.leaf:build_femnist", "LEAF FEMNIST from task.path, one client per writer", ds.FEMNISTTask),
    "shakespeare": ("asyncfl.tasks.leaf:build_shakespeare", "LEAF Shakespeare from task.path, one client per speaker",
                    ds.ShakespeareTask),
    "cifar10": ("asyncfl.tasks.cifar:build_cifar10", "CIFAR-10 python pickles from task.path, Dirichlet or shards",
                ds.CIFAR10Task),
    "cifar100": ("asyncfl.tasks.cifar:build_cifar100", "CIFAR-100 python pickles from task.path, Dirichlet or shards",
                 ds.CIFAR100Task),
    "mnist": ("asyncfl.tasks.mnist:build_mnist", "MNIST / EMNIST IDX files from task.path, Dirichlet or shards", ds.MNISTTask),
    "tff-emnist": ("asyncfl.tasks.tff_emnist:build_tff_emnist", "TensorFlow Federated's EMNIST HDF5 from task.path "
                   "(h5py), one client per writer", ds.TFFEMNISTTask),
    "femnist-twin": ("asyncfl.tasks.femnist_twin:build_femnist_twin", "synthetic FEMNIST-shaped writers, generated offline",
                     ds.FEMNISTTwinTask),
})

# -- executors (docs/architecture.md): where local training runs --------------------------------
EXECUTORS: Registry = Registry("executor", "run.executor", {
    "inline": ("asyncfl.compute.executors:build_inline", "in the event loop's thread (batched with run.batched)"),
    "threads": ("asyncfl.compute.executors:build_threads", "a thread pool of run.workers threads"),
    "processes": ("asyncfl.compute.executors:build_processes", "run.workers spawned processes"),
    "ray": ("asyncfl.compute.executors:build_ray", "Ray remote tasks (optional dependency)"),
})

# -- privacy (docs/privacy.md) -----------------------------------------------------------------
SAMPLINGS: Registry = Registry("sampling assumption", "privacy.sampling", {
    "poisson": ("asyncfl.privacy.sampling:POISSON",
                "Poisson subsampling at q = M/N per step, T steps (an approximation: FedBuff does not Poisson-sample)"),
    "participation-cap": ("asyncfl.privacy.sampling:PARTICIPATION_CAP",
                          "at most max_participations steps per client, composed without amplification (a guarantee)"),
})

ACCOUNTANTS: Registry = Registry("privacy accountant", "privacy.accountant", {
    "pld": ("asyncfl.privacy.accountants:pld_epsilon", "privacy loss distributions (tight)"),
    "rdp": ("asyncfl.privacy.accountants:rdp_epsilon", "Rényi DP (looser, cheap)"),
})

COUNT_MODES: Registry = Registry("count post-processing", "privacy.counts", {
    "raw": ("asyncfl.privacy.counts:counts_raw", "unchanged noisy counts"),
    "clamp": ("asyncfl.privacy.counts:counts_clamp", "max(ĉ, 0)"),
    "project": ("asyncfl.privacy.counts:counts_project", "clamp, then rescale to sum C"),
    "simplex": ("asyncfl.privacy.counts:project_simplex", "Euclidean projection onto {c ≥ 0, Σc = C}"),
})

REGISTRIES: tuple[Registry, ...] = (
    RULES, ALGORITHMS, PROTOCOLS, LATENCIES, TASKS, EXECUTORS, SAMPLINGS, ACCOUNTANTS, COUNT_MODES,
)
"""Every registry, for tools that list what exists (and the architecture test)."""


def _check_tags(registry: Registry) -> None:
    """A tagged section's variant carries its own name as the tag's only value and default."""
    tag = registry.field.partition(".")[2]
    for entry in registry.entries():
        field = entry.config.model_fields.get(tag) if entry.config is not None else None
        if field is None or field.default != entry.name:
            raise ValueError(f"{registry.kind} {entry.name!r}: its config class must have {tag} = {entry.name!r}")


_check_tags(LATENCIES)
_check_tags(TASKS)
