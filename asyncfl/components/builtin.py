"""asyncfl's own components, declared exactly as a user's plug-in declares its own
(docs/extending.md): this module's :data:`COMPONENTS` is the entry point ``asyncfl`` of the
group ``asyncfl.plugins`` in ``pyproject.toml``.

Builders are ``"module:attribute"`` strings, imported on first use, so this module — and with it
validating a scenario, listing what exists, ``--help`` — imports neither torch nor any
implementation: only the torch-free config classes and checks.
"""

from __future__ import annotations

from typing import Any

from asyncfl.components.core import Component
from asyncfl.components.traits import (
    AlgorithmTraits, AvailabilityTraits, ExecutorTraits, LatencyTraits, MemoryPart, MemoryShape, ProtocolTraits, RuleTraits,
    NoiseTraits, SamplingTraits, SolverTraits, TaskTraits, TrackerTraits,
)
from asyncfl.config import checks
from asyncfl.config import datasets as ds
from asyncfl.config import latency as lat
from asyncfl.config import tasks as tk
from asyncfl.config.client import AdamSolverConfig, ClipHookConfig, LinearisedSolverConfig, SGDSolverConfig, TopKHookConfig
from asyncfl.config.population import DiurnalConfig, TraceAvailabilityConfig
from asyncfl.config.privacy import BandedNoiseConfig, BLTNoiseConfig, ParticipationCapConfig, RandomAllocationConfig
from asyncfl.config.trackers import MLflowKeys, WandbKeys
from asyncfl.config.server import (
    AdamConfig, ChainConfig, ClipConfig, DelayScaleConfig, FADASConfig, FedBuffConfig, FedDRConfig, FedPDConfig, MAFullConfig, MALightConfig,
    MomentumConfig, SyncConfig,
)


# -- memory beyond the engine's own (docs/architecture.md §8) -------------------------------------------
def _ma_full_memory(cfg: MAFullConfig, shape: MemoryShape) -> tuple[MemoryPart, ...]:
    """The history's capacity doubles (up to 2T rows, or the window L); the bands of ``W`` and of
    its factor hold ``capacity × (b+1)`` floats each for the largest staleness ``b``
    (docs/server-rules.md §4), counted here as ``b + 1 ≤ min(capacity, 2K + 1)`` for ``K``
    clients in flight — an estimate, staleness has no bound (with a window: the kept rows of W,
    ``L × L``). Each step records a row ``a_t`` of length t (``4T²`` bytes in all), which
    ``counts.npz`` holds zero-padded to ``T × T`` and the bias report reads back whole (``8T²``)."""
    steps = shape.steps
    cap = 2 * steps if cfg.ma_window is None else min(2 * steps, cfg.ma_window)
    width = cap if cfg.ma_window is not None else min(cap, 2 * shape.in_flight + 1)
    return (MemoryPart("MA-full's history of aggregates and its factors", cap * shape.vector + 2 * cap * width * 8,
                       ("run.steps", "server.ma_window", "task")),
            MemoryPart("MA-full's recorded coefficients", steps * steps * (4 + 8), ("run.steps",), record=True))


def _ma_light_memory(cfg: MALightConfig, shape: MemoryShape) -> tuple[MemoryPart, ...]:
    """Each step records ``(u_t, v_t)``: a 2-entry array (~112 bytes of numpy header, 16 of data,
    its list slot) and its 16 bytes again when the bias report reads the file back."""
    return (MemoryPart("MA-light's recorded coefficients", shape.steps * (112 + 16 + 8 + 16), ("run.steps",), record=True),)


def _rows_per_client(rows: int, name: str) -> Any:
    """The splitting baselines keep ``rows`` model vectors per client (their memory and the server's
    table of latest uploads, asyncfl.server.splitting)."""
    def memory(cfg: Any, shape: MemoryShape) -> tuple[MemoryPart, ...]:
        return (MemoryPart(f"{name}'s {rows} model vectors per client", rows * shape.clients * shape.vector,
                           ("population.clients", "server.algorithm", "task")),)
    return memory


def _ca2fl_memory(cfg: None, shape: MemoryShape) -> tuple[MemoryPart, ...]:
    """CA2FL's cache: one model vector per client, copied once per step to keep the state pure."""
    return (MemoryPart("CA2FL's cached update per client (and its copy in a step)", 2 * shape.clients * shape.vector,
                       ("population.clients", "task")),)


def _diurnal_memory(cfg: Any, shape: MemoryShape) -> tuple[MemoryPart, ...]:
    """A diurnal schedule's window starts and ends (float64) and always-online flags: 17 bytes a
    client (asyncfl.clients.availability.Diurnal)."""
    return (MemoryPart("the diurnal availability schedule", 17 * shape.clients, ("population.clients",)),)


def _trace_memory(cfg: Any, shape: MemoryShape) -> tuple[MemoryPart, ...]:
    """A trace's clients map onto its profiles by an int32 index, 4 bytes a client (the profiles
    themselves are the file's windows, bounded by the file size)."""
    return (MemoryPart("the availability trace's index of profiles", 4 * shape.clients, ("population.clients",)),)


def _noise_memory(rows: Any) -> Any:
    """A correlated-noise stream keeps ``rows(cfg)`` past noise vectors of ``d + L`` float64
    entries (docs/privacy.md §12)."""
    def memory(cfg: Any, shape: MemoryShape) -> tuple[MemoryPart, ...]:
        return (MemoryPart("the correlated noise's buffers", rows(cfg) * shape.params * 8,
                           ("privacy.noise", "task")),)
    return memory


def _chain_traits(links: tuple[Component, ...]) -> RuleTraits:
    """A chain's traits from its links' (docs/server-rules.md §10). The chain is linear in the
    aggregates only if every link is; its weights are then the product of the links', so they
    are one of ``bias.json``'s rows only when at most one link is not the identity (``own_bias =
    "none"``): the chain takes that link's ``own_bias`` and ``target`` (or ``"none"``). A clip,
    Adam, or two momentum links give ``own_bias = None``. It records the coefficients of the one
    link that records them (two such links: none). Its checks and memory are its links', each on
    its own keys."""
    traits = [link.traits for link in links]
    moving = [t for t in traits if t.own_bias != "none"]
    linear = all(t.own_bias is not None for t in traits) and len(moving) <= 1
    recorded = [t.coefficients for t in traits if t.coefficients is not None]
    checks = [t.check for t in traits if t.check is not None]

    def check(sc: Any) -> list[str]:
        return [problem for each in checks for problem in each(sc)]

    def memory(cfg: Any, shape: MemoryShape) -> tuple[MemoryPart, ...]:
        return tuple(part for link in links for part in link.traits.memory(link.own_config(cfg), shape))

    return RuleTraits(own_bias=(moving[0].own_bias if moving else "none") if linear else None,
                      target=moving[0].target if linear and moving else "momentum",
                      coefficients=recorded[0] if len(recorded) == 1 else None,
                      check=check if checks else None, memory=memory)


def _task(name: str, module: str, summary: str, config: type, **traits: Any) -> Component:
    return Component("task", name, f"asyncfl.tasks.{module}:build_{module}", config, TaskTraits(**traits), summary=summary)


def _draw(name: str, summary: str, config: type) -> Component:
    return Component("latency", name, f"asyncfl.clients.latency:build_{name}", config, summary=summary)


_SPLITTING = dict(protocols=("sync",), uses_rule=False, mu="positive", private=False)

COMPONENTS: tuple[Component, ...] = (
    # -- tasks (docs/tasks.md) ----------------------------------------------------------------------
    _task("quadratic", "quadratic", "least squares ½‖A_k θ − b_k‖²", tk.QuadraticTask,
          closed_form_prox=True, check=checks.check_quadratic),
    _task("synthetic", "synthetic", "FedProx Synthetic(α, β)", tk.SyntheticTask),
    _task("digits", "digits", "scikit-learn 8×8 digits, Dirichlet non-IID", tk.DigitsTask),
    Component("task", "gaussian-mlp", "asyncfl.tasks.gaussian_mlp:build_gaussian_mlp", tk.GaussianMLPTask,
              summary="Gaussian inputs, one-hidden-layer MLP"),
    _task("mnist1d", "mnist1d", "the canonical MNIST-1D (mnist1d package), Dirichlet non-IID", tk.MNIST1DTask),
    # read from the user's folder task.path (asyncfl.datasets; docs/tasks.md §13–17), and the offline twin (§18)
    Component("task", "femnist", "asyncfl.tasks.leaf:build_femnist", ds.FEMNISTTask,
              summary="LEAF FEMNIST from task.path, one client per writer"),
    Component("task", "shakespeare", "asyncfl.tasks.leaf:build_shakespeare", ds.ShakespeareTask,
              summary="LEAF Shakespeare from task.path, one client per speaker"),
    Component("task", "cifar10", "asyncfl.tasks.cifar:build_cifar10", ds.CIFAR10Task,
              summary="CIFAR-10 python pickles from task.path, Dirichlet or shards"),
    Component("task", "cifar100", "asyncfl.tasks.cifar:build_cifar100", ds.CIFAR100Task,
              summary="CIFAR-100 python pickles from task.path, Dirichlet or shards"),
    _task("mnist", "mnist", "MNIST / EMNIST IDX files from task.path, Dirichlet or shards", ds.MNISTTask),
    Component("task", "tff-emnist", "asyncfl.tasks.tff_emnist:build_tff_emnist", ds.TFFEMNISTTask,
              summary="TensorFlow Federated's EMNIST HDF5 from task.path (h5py), one client per writer"),
    Component("task", "femnist-twin", "asyncfl.tasks.femnist_twin:build_femnist_twin", ds.FEMNISTTwinTask,
              summary="synthetic FEMNIST-shaped writers, generated offline"),
    Component("task", "hf-images", "asyncfl.tasks.hf:build_hf_images", ds.HFImagesTask,
              summary="Hugging Face datasets images (save_to_disk or parquet) from task.path, Flower Datasets' partitioners"),

    # -- latency models (docs/protocol.md §4) ---------------------------------------------------------
    _draw("constant", "value", lat.ConstantLatency),
    _draw("exponential", "Exponential(mean)", lat.ExponentialLatency),
    _draw("halfnormal", "|N(0, scale²)|", lat.HalfNormalLatency),
    _draw("lognormal", "median · exp(σ z)", lat.LogNormalLatency),
    _draw("uniform", "Uniform(low, high)", lat.UniformLatency),
    _draw("pareto", "scale · (1 + Lomax(shape)), heavy-tailed", lat.ParetoLatency),
    Component("latency", "trace", "asyncfl.clients.replay:ReplayFleet", lat.TraceLatency,
              LatencyTraits(mode="replay", speeds_from="the recorded trace", check=checks.check_trace_latency),
              state=("asyncfl.clients.replay:ReplayState",),
              summary="replay an earlier run's updates.csv (not drawn)"),
    Component("latency", "fedscale", "asyncfl.clients.fedscale:task_latencies", lat.FedScaleLatency,
              LatencyTraits(mode="profiles", speeds_from="the FedScale device profiles", check=checks.check_fedscale_latency),
              summary="FedScale device profiles, fixed per client (not drawn)"),

    # -- availability (docs/protocol.md §5) -----------------------------------------------------------
    Component("availability", "always", "asyncfl.clients.availability:always", summary="every client always online"),
    Component("availability", "diurnal", "asyncfl.clients.availability:build_diurnal", DiurnalConfig,
              AvailabilityTraits(memory=_diurnal_memory), summary="online a fraction of every period, from a per-client phase"),
    Component("availability", "trace", "asyncfl.clients.fedscale:build_availability", TraceAvailabilityConfig,
              AvailabilityTraits(check=checks.check_trace_availability, memory=_trace_memory),
              summary="a FedScale availability trace"),

    # -- protocols (docs/protocol.md) -----------------------------------------------------------------
    Component("protocol", "fedbuff", "asyncfl.sim.protocols:FedBuffProtocol", FedBuffConfig,
              ProtocolTraits(in_flight_key="concurrency", stale=True, resolve=checks.resolve_fedbuff, check=checks.check_fedbuff,
                             not_poisson=("FedBuff does not sample: it dispatches from the idle population as others arrive, a "
                                          "client in flight cannot be picked and one whose upload a step just took can be "
                                          "dispatched again at once, so amplification by subsampling does not follow from the "
                                          "protocol")),
              state=("asyncfl.sim.state:FedBuffState", "asyncfl.sim.state:WaiterState"),
              summary="K clients train at a time, the server steps every C uploads"),
    Component("protocol", "sync", "asyncfl.sim.protocols:SyncProtocol", SyncConfig,
              ProtocolTraits(in_flight_key="cohort", stale=False, resolve=checks.resolve_sync, check=checks.check_sync,
                             not_poisson=("a synchronous cohort is a fixed-size sample without replacement of the idle, online "
                                          "clients (with over-selection only its first C arrivals contribute), not a Poisson "
                                          "sample")),
              state=("asyncfl.sim.state:SyncState", "asyncfl.sim.state:WaiterState"),
              summary="rounds: a cohort is sampled, the first C arrivals are accepted"),

    # -- server rules (docs/server-rules.md) ----------------------------------------------------------
    Component("rule", "sgd", "asyncfl.server.rules:SGD.from_config", None, RuleTraits(own_bias="none"),
              state=("asyncfl.server.rules:EmptyState",), summary="m_t = r_t"),
    Component("rule", "momentum", "asyncfl.server.rules:Momentum.from_config", MomentumConfig,
              RuleTraits(own_bias="momentum"), state=("asyncfl.server.rules:TraceState",),
              summary="heavy ball: m_t = β m_{t−1} + r_t"),
    Component("rule", "nesterov", "asyncfl.server.rules:Nesterov.from_config", MomentumConfig,
              RuleTraits(own_bias="momentum", target="nesterov"), state=("asyncfl.server.rules:TraceState",),
              summary="Nesterov momentum: m_t = r_t + β h_t"),
    Component("rule", "adam", "asyncfl.server.rules:Adam.from_config", AdamConfig, RuleTraits(own_bias=None),
              state=("asyncfl.server.rules:AdamState",), summary="Adam on r_t, bias-corrected moments"),
    Component("rule", "ma-full", "asyncfl.server.ma:MAFull.from_config", MAFullConfig,
              RuleTraits(own_bias="ma_full", coefficients="full", memory=_ma_full_memory),
              state=("asyncfl.server.ma:MAFullState",),
              summary="momentum approximation: least-squares weights over the history"),
    Component("rule", "ma-light", "asyncfl.server.ma:MALight.from_config", MALightConfig,
              RuleTraits(own_bias="ma_light", coefficients="pair", memory=_ma_light_memory),
              state=("asyncfl.server.ma:MALightState",),
              summary="momentum approximation: one buffer, two fitted coefficients"),
    Component("rule", "sgd-delay", "asyncfl.server.async_rules:DelayAdaptiveSGD.from_config", DelayScaleConfig,
              RuleTraits(own_bias=None), state=("asyncfl.server.rules:EmptyState",),
              summary="m_t = s_t r_t, the step shrunk as min(1, κ/τ_max) past τ_c"),
    Component("rule", "fadas", "asyncfl.server.async_rules:FADAS.from_config", FADASConfig,
              RuleTraits(own_bias=None), state=("asyncfl.server.async_rules:AMSGradState",),
              summary="FADAS: AMSGrad on r_t with the delay-adaptive step"),

    Component("rule", "clip", "asyncfl.server.chain:Clip.from_config", ClipConfig, RuleTraits(own_bias=None),
              state=("asyncfl.server.rules:EmptyState",), summary="m_t = r_t · min(1, τ/‖r_t‖): the global-norm clip"),
    Component("rule", "chain", "asyncfl.server.chain:build_chain", ChainConfig,
              RuleTraits(links="chain", combine=_chain_traits), state=("asyncfl.server.chain:ChainState",),
              summary="the rules server.chain lists, applied in order (clip, then momentum, …)"),

    # -- server algorithms (docs/baselines.md) --------------------------------------------------------
    Component("algorithm", "fedavg", "asyncfl.server.algorithms:build_pseudo_gradient", None, AlgorithmTraits(mu="zero"),
              state=("asyncfl.server.algorithms:PseudoGradientState",),
              summary="pseudo-gradient r_t through the server rule"),
    Component("algorithm", "fedprox", "asyncfl.server.algorithms:build_pseudo_gradient", None, AlgorithmTraits(mu="positive"),
              state=("asyncfl.server.algorithms:PseudoGradientState",),
              summary="FedAvg with the proximal term (μ/2)‖θ − centre‖²"),
    Component("algorithm", "fedsplit", "asyncfl.server.splitting:build_fedsplit", None,
              AlgorithmTraits(**_SPLITTING, memory=_rows_per_client(3, "fedsplit")),
              state=("asyncfl.server.splitting:BaselineState", "asyncfl.server.splitting:ClientJob"),
              summary="FedSplit: Peaceman–Rachford splitting"),
    Component("algorithm", "feddr", "asyncfl.server.splitting:build_feddr", FedDRConfig,
              AlgorithmTraits(**{**_SPLITTING, "protocols": None}, one_upload_per_client=True,
                              memory=_rows_per_client(3, "feddr"), check=checks.check_feddr),
              state=("asyncfl.server.splitting:BaselineState", "asyncfl.server.splitting:ClientJob"),
              summary="FedDR: Douglas–Rachford splitting, optional server regulariser"),
    Component("algorithm", "fedpd", "asyncfl.server.splitting:build_fedpd", FedPDConfig,
              AlgorithmTraits(**_SPLITTING, memory=_rows_per_client(4, "fedpd")),
              state=("asyncfl.server.splitting:BaselineState", "asyncfl.server.splitting:ClientJob"),
              summary="FedPD: primal-dual, randomly skipped communication"),
    Component("algorithm", "ca2fl", "asyncfl.server.ca2fl:build_ca2fl", None,
              AlgorithmTraits(mu="zero", private=False, memory=_ca2fl_memory, check=checks.check_ca2fl),
              state=("asyncfl.server.ca2fl:CA2FLState",),
              summary="CA2FL: the aggregate calibrated with every client's cached update"),

    # -- local solvers (docs/tasks.md §8) ---------------------------------------------------------
    Component("solver", "sgd", "asyncfl.compute.solvers:build_sgd", SGDSolverConfig, SolverTraits(batched=True),
              summary="mini-batch SGD with optional momentum and weight decay"),
    Component("solver", "adam", "asyncfl.compute.solvers:build_adam", AdamSolverConfig, SolverTraits(batched=False),
              summary="mini-batch Adam (as torch.optim.Adam)"),
    Component("solver", "exact", "asyncfl.compute.solvers:build_exact", None,
              SolverTraits(needs_closed_form=True, local_work=False, batched=True),
              summary="the closed-form prox_{f_k,μ}(centre) (quadratic tasks)"),
    Component("solver", "linearised", "asyncfl.compute.solvers:build_linearised", LinearisedSolverConfig,
              SolverTraits(batched=False), summary="closed-form steps on the linearised local problem, plain or "
              "variance-reduced gradients"),

    # -- update hooks (docs/extending.md §7) ---------------------------------------------------------
    Component("hook", "none", "asyncfl.compute.hooks:build_none", summary="uploads as the algorithm made them"),
    Component("hook", "clip-norm", "asyncfl.compute.hooks:build_clip", ClipHookConfig,
              summary="client-side clipping: m · min(1, update_clip/‖m‖)"),
    Component("hook", "top-k", "asyncfl.compute.hooks:build_topk", TopKHookConfig,
              summary="keep the update_topk fraction of entries of largest magnitude"),

    # -- executors (docs/architecture.md §4) ----------------------------------------------------------
    Component("executor", "inline", "asyncfl.compute.executors:build_inline", None, ExecutorTraits(batched=True),
              summary="in the event loop's thread (batched with run.batched)"),
    Component("executor", "threads", "asyncfl.compute.executors:build_threads", None, ExecutorTraits(batched=False, model_per_worker=True),
              summary="a thread pool of run.workers threads"),
    Component("executor", "processes", "asyncfl.compute.executors:build_processes", None,
              ExecutorTraits(batched=True, task_per_worker=True), summary="run.workers spawned processes"),
    Component("executor", "ray", "asyncfl.compute.executors:build_ray", None, ExecutorTraits(batched=True),
              summary="Ray remote tasks (optional dependency)"),

    # -- privacy (docs/privacy.md) --------------------------------------------------------------------
    Component("sampling", "poisson", "asyncfl.privacy.sampling:build_poisson", None, SamplingTraits(check=checks.check_poisson),
              summary="Poisson subsampling at q = M/N per step, T steps (an approximation: FedBuff does not Poisson-sample)"),
    Component("sampling", "participation-cap", "asyncfl.privacy.sampling:build_participation_cap", ParticipationCapConfig,
              SamplingTraits(check=checks.check_participation_cap, schema=checks.participation_schema),
              summary="at most max_participations steps per client, min_separation apart, composed without "
                      "amplification (a guarantee)"),
    Component("sampling", "random-allocation", "asyncfl.privacy.sampling:build_random_allocation", RandomAllocationConfig,
              SamplingTraits(check=checks.check_random_allocation, allotment=checks.allotment_of),
              summary="each client allotted allotted_steps of every allotment_window steps, drawn from the seed; "
                      "amplified by random allocation (a guarantee if the allotment stays secret)"),
    Component("accountant", "pld", "asyncfl.privacy.accountants:build_pld", summary="privacy loss distributions (tight)"),
    Component("accountant", "rdp", "asyncfl.privacy.accountants:build_rdp", summary="Rényi DP (looser, cheap)"),
    Component("counts", "raw", "asyncfl.privacy.counts:build_raw", summary="unchanged noisy counts"),
    Component("counts", "clamp", "asyncfl.privacy.counts:build_clamp", summary="max(ĉ, 0)"),
    Component("counts", "project", "asyncfl.privacy.counts:build_project", summary="clamp, then rescale to sum C"),
    Component("counts", "simplex", "asyncfl.privacy.counts:build_simplex", summary="Euclidean projection onto {c ≥ 0, Σc = C}"),
    Component("noise", "iid", "asyncfl.privacy.factorization:build_iid", None, NoiseTraits(correlated=False),
              state=("asyncfl.privacy.factorization:NoiseState",), summary="independent Gaussian noise on every step"),
    Component("noise", "banded", "asyncfl.privacy.factorization:build_banded", BandedNoiseConfig,
              NoiseTraits(correlated=True, check=checks.check_correlated_noise,
                          memory=_noise_memory(lambda cfg: cfg.noise_bands - 1)),
              state=("asyncfl.privacy.factorization:NoiseState",),
              summary="correlated noise of a banded Toeplitz strategy (noise_bands), optimised for noise_workload"),
    Component("noise", "blt", "asyncfl.privacy.factorization:build_blt", BLTNoiseConfig,
              NoiseTraits(correlated=True, check=checks.check_correlated_noise,
                          memory=_noise_memory(lambda cfg: cfg.noise_buffers)),
              state=("asyncfl.privacy.factorization:NoiseState",),
              summary="correlated noise of a buffered-linear-Toeplitz strategy (noise_buffers), optimised for noise_workload"),

    # -- experiment trackers (docs/run-directory.md §15): run.trackers lists them, each one's keys
    # in run.tracker.NAME
    Component("tracker", "tensorboard", "asyncfl.run.tensorboard:TensorBoardTracker", None,
              TrackerTraits(rewrites_on_resume=True),
              summary="TensorBoard event files in RUN_DIR/tensorboard (asyncfl[tensorboard])"),
    Component("tracker", "mlflow", "asyncfl.run.external_trackers:MLflowTracker", MLflowKeys,
              summary="an MLflow store: a file or database backend, or a server (asyncfl[mlflow])"),
    Component("tracker", "wandb", "asyncfl.run.external_trackers:WandbTracker", WandbKeys,
              summary="Weights & Biases, offline by default (asyncfl[wandb])"),
)
