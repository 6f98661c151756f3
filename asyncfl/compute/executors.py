"""Where local training runs (docs/architecture.md §2 principle 2).

An executor turns a :class:`~asyncfl.compute.training.LocalJob` into an asyncio future of the local
model. The simulator submits a job at dispatch and awaits its future only when the buffer
flushes, so compute overlaps with event processing. Jobs carry their own seeds: the results do
not depend on the executor.

=============  ==========================================================================
``inline``     trains in the event loop's thread when the loop first gets control (flush)
``batched``    (``inline`` + ``run.batched``) the same, all pending jobs at once with vmap
``threads``    a thread pool, from dispatch on (torch releases the GIL)
``processes``  ``run.workers`` spawned processes that build the task once from the scenario;
               a model version is sent to each worker once, jobs then name it
``ray``        Ray remote tasks (local ``ray.init`` or ``run.ray_address``); a model version
               is put in the object store once, tasks take its reference as an argument
=============  ==========================================================================

The names are registered in :data:`asyncfl.config.registries.EXECUTORS` (docs/architecture.md);
:func:`make_executor` builds the one ``run.executor`` names.

On a device (``run.device``, :mod:`asyncfl.compute.device`) the in-process executors train where
the task's tensors are; process and Ray workers place the task they build on the same device,
models travel between processes as CPU arrays, and the parent puts each result on the run's
device.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures as cf
import copy
import dataclasses
import itertools
import math
import multiprocessing as mp
import os
import pickle
import threading
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Protocol

import numpy as np
import torch

from asyncfl.components.contracts import BuildContext
from asyncfl.compute.device import device_of, place_task, prepare
from asyncfl.compute.lifetime import die_with_parent
from asyncfl.compute.solvers import LocalSolver
from asyncfl.compute.training import LocalJob
from asyncfl.errors import ScenarioError
from asyncfl.tasks.base import Task

if TYPE_CHECKING:
    from asyncfl.config.sections import ClientConfig, RunConfig


class Executor(Protocol):
    def submit(self, job: LocalJob) -> "asyncio.Future[torch.Tensor]": ...

    async def aclose(self) -> None: ...


class InlineExecutor:
    """Trains when the result is first needed (at flush), in the event loop's thread."""

    def __init__(self, task: Task, client: ClientConfig, solver: LocalSolver) -> None:
        self.task, self.client, self.solver = task, client, solver

    def submit(self, job: LocalJob) -> "asyncio.Future[torch.Tensor]":
        loop = asyncio.get_running_loop()
        return loop.create_task(self._run(job))

    async def _run(self, job: LocalJob) -> torch.Tensor:
        return self.solver.train(self.task, self.client, job)

    async def aclose(self) -> None:
        return None


Pending = list[tuple[LocalJob, "asyncio.Future[torch.Tensor]"]]


class _Batcher:
    """Collects the jobs submitted until the event loop next gets control — the flush: the
    engine runs events synchronously until it awaits the first upload — and hands the live
    ones (not cancelled) to ``train`` in one call. Between two flushes the server's model does
    not change, so a batch is the jobs of one model version.

    With ``parts`` (remote workers), a batch also goes out as soon as it holds a ``1/parts``
    share of the jobs submitted between the last two flushes: each worker then gets about one
    group per flush interval, and trains it while the engine goes on simulating."""

    def __init__(self, train: Callable[[Pending], None], parts: int | None = None) -> None:
        self._train = train
        self._parts = parts
        self._pending: Pending = []
        self._since_flush = 0
        self._threshold = math.inf
        self.batches: list[int] = []  # size of every batch (for benchmarks and tests)

    def submit(self, job: LocalJob) -> "asyncio.Future[torch.Tensor]":
        loop = asyncio.get_running_loop()
        future: asyncio.Future[torch.Tensor] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.append((job, future))
        self._since_flush += 1
        if len(self._pending) >= self._threshold:
            self._send()
        return future

    def _flush(self) -> None:
        self._send()
        if self._parts is not None and self._since_flush:
            self._threshold = max(1, math.ceil(self._since_flush / self._parts))
        self._since_flush = 0

    def _send(self) -> None:
        live = [(job, future) for job, future in self._pending if not future.done()]
        self._pending = []
        if live:
            self.batches.append(len(live))
            self._train(live)

    def clear(self) -> None:
        self._pending = []

    def split(self, live: Pending, slots: int) -> list[Pending]:
        """``live`` in contiguous groups of about one worker's share, at most ``slots`` of them
        (all ``slots`` before the first flush has measured a share)."""
        share = self._threshold
        parts = slots if not math.isfinite(share) else max(1, min(slots, round(len(live) / share)))
        return _chunks(live, parts)


class _GroupExecutor:
    """What the process and Ray executors share: unbatched, a job goes out at once as a group
    of one; batched, :class:`_Batcher` collects the groups. Subclasses send a group
    (``_send(group, batched)``) and split a batch (``_ship``)."""

    _batcher: _Batcher | None

    def submit(self, job: LocalJob) -> "asyncio.Future[torch.Tensor]":
        if self._batcher is not None:
            return self._batcher.submit(job)
        future = asyncio.get_running_loop().create_future()
        self._send([(job, future)], batched=False)
        return future

    def _send(self, group: Pending, batched: bool) -> None:
        raise NotImplementedError


def _chunks(items: list, parts: int) -> list[list]:
    """``items`` in at most ``parts`` contiguous chunks whose sizes differ by at most one."""
    parts = max(1, min(parts, len(items)))
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (i < extra)
        out.append(items[start:end])
        start = end
    return out


class BatchedExecutor:
    """Inline, but batched: every job of a flush (:class:`_Batcher`) is trained in one
    :func:`~asyncfl.compute.training.train_batched` call, so clients of one model version share
    batched gradient steps. Jobs are plain futures resolved by one scheduled callback."""

    def __init__(self, task: Task, client: ClientConfig, solver: LocalSolver) -> None:
        self.task, self.client, self.solver = task, client, solver
        self._batcher = _Batcher(self._train)
        self.batches = self._batcher.batches

    def submit(self, job: LocalJob) -> "asyncio.Future[torch.Tensor]":
        return self._batcher.submit(job)

    def _train(self, live: Pending) -> None:
        try:
            results = self.solver.train_batched(self.task, self.client, [job for job, _ in live])
        except Exception as exc:  # surfaces where the futures are awaited
            for _, future in live:
                future.set_exception(exc)
            return
        for (_, future), theta in zip(live, results):
            future.set_result(theta)

    async def aclose(self) -> None:
        self._batcher.clear()


class ThreadExecutor:
    """Trains in a thread pool as soon as the job is dispatched (torch releases the GIL).

    Every worker thread trains on its own copy of the model: ``torch.func.functional_call``
    swaps the module's parameters in place while it runs, so two threads (or a thread and the
    evaluation in the event loop) sharing one module would compute with each other's weights.
    """

    def __init__(self, task: Task, client: ClientConfig, solver: LocalSolver, workers: int) -> None:
        self.task, self.client, self.solver = task, client, solver
        self.pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="asyncfl-train")
        self._local = threading.local()

    def _thread_task(self) -> Task:
        task = getattr(self._local, "task", None)
        if task is None:
            task = self._local.task = dataclasses.replace(self.task, model=copy.deepcopy(self.task.model))
        return task

    def _train(self, job: LocalJob) -> torch.Tensor:
        return self.solver.train(self._thread_task(), self.client, job)

    def submit(self, job: LocalJob) -> "asyncio.Future[torch.Tensor]":
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self.pool, self._train, job)

    async def aclose(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class NullExecutor:
    """A zero-cost "training" that returns the start model (Δ = 0): measures the engine alone
    (benchmarks, scale tests). Not selectable from a scenario."""

    def submit(self, job: LocalJob) -> "asyncio.Future[torch.Tensor]":
        future = asyncio.get_running_loop().create_future()
        future.set_result(job.start)
        return future

    async def aclose(self) -> None:
        return None


# ---------------------------------------------------------------------------------------------
# Shipping model versions once: both remote executors key a tensor by its identity. The engine
# never mutates a model in place (a step makes a new θ), so one tensor object = one version.
class _VersionKeys:
    """``key(tensor)`` → a small int, the same for the same tensor object; remembers the last
    ``size`` tensors (holding them alive, so ``id`` cannot be reused while remembered)."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self._by_id: collections.OrderedDict[int, tuple[torch.Tensor, int, Any]] = collections.OrderedDict()
        self._next = itertools.count()

    def get(self, tensor: torch.Tensor, make: Callable[[torch.Tensor], Any] = lambda t: None) -> tuple[int, Any, bool]:
        """``(key, payload, new)``; ``payload = make(tensor)`` is computed once per tensor."""
        hit = self._by_id.get(id(tensor))
        if hit is not None and hit[0] is tensor:
            return hit[1], hit[2], False
        key = next(self._next)
        entry = (tensor, key, make(tensor))
        self._by_id[id(tensor)] = entry
        if len(self._by_id) > self.size:
            self._by_id.popitem(last=False)
        return key, entry[2], True


class TaskRecipe(NamedTuple):
    """How a worker rebuilds the run's task instead of receiving its data: ``build(cfg, ctx)``
    with the task's registered builder (pickled by reference), its validated ``[task]`` section
    and its context (clients, seed). Same arguments ⇒ the same task, bit for bit."""

    build: Callable[[Any, BuildContext], Task]
    cfg: Any
    ctx: BuildContext


def _worker_task(source: TaskRecipe | bytes, device: str) -> Task:
    """A worker's task: built from ``source`` and placed on the run's ``device`` (its
    deterministic settings asked for there too)."""
    where = torch.device(device)
    prepare(where)
    return place_task(_build_source(source), where)


def _build_source(source: TaskRecipe | bytes) -> Task:
    """A task from what the parent sent: a :class:`TaskRecipe`, or the pickled task itself (a
    task passed to :class:`~asyncfl.sim.engine.Simulation` by hand)."""
    if isinstance(source, bytes):
        return pickle.loads(source)
    return source.build(source.cfg, source.ctx)


def _task_source(task: Task, recipe: TaskRecipe | None) -> TaskRecipe | bytes:
    """The recipe, or the task pickled from the CPU (a worker places it on the run's device)."""
    return recipe if recipe is not None else pickle.dumps(place_task(task, torch.device("cpu")))


# ---------------------------------------------------------------------------------------------
WORKER_CACHE = 8  # model versions a process worker keeps (FIFO, mirrored by the parent)
#: with run.batched, the groups a worker gets per flush interval. A group goes out as soon as it
#: is full, so the workers train while the engine simulates; but every train_batched call has a
#: fixed set-up cost (≈ 0.7 ms for gaussian-mlp, benchmarks/parallel.py), so more, smaller groups
#: cost more worker time than they save in waiting
GROUPS_PER_WORKER = 1


def _train_group(task: Task, cfg: ClientConfig, solver: LocalSolver, jobs: list[LocalJob], batched: bool) -> np.ndarray:
    """The trained models of ``jobs`` as one ``(n, d)`` array: one ``solver.train_batched`` call,
    or ``solver.train`` job by job."""
    models = solver.train_batched(task, cfg, jobs) if batched else [solver.train(task, cfg, job) for job in jobs]
    return torch.stack([m.reshape(-1) for m in models]).cpu().numpy()


class _WorkerVersions:
    """The model versions a process worker holds, by key: the parent's FIFO of what it sent
    this worker (:data:`WORKER_CACHE`), mirrored. A spec is ``(key, array)`` the first time a
    version comes (then it is kept), ``(key,)`` after that.

    A version is one tensor object here, however many specs name it: ``train_batched`` batches
    the jobs that share their start and centre *objects*. (A job whose centre is its start
    carries the same ``(key, array)`` spec twice; building a second tensor from it once split
    the first job of every version into a group of its own, trained unbatched — for 5 local
    epochs that doubled the time of a 25-job group.)"""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self._by_key: collections.OrderedDict[int, torch.Tensor] = collections.OrderedDict()
        self._device = torch.device(device)

    def get(self, spec: tuple) -> torch.Tensor:
        key = spec[0]
        if len(spec) == 2 and key not in self._by_key:
            self._by_key[key] = torch.from_numpy(spec[1]).to(self._device)
            if len(self._by_key) > WORKER_CACHE:
                self._by_key.popitem(last=False)
        return self._by_key[key]


def _process_worker(parent: int, by_main_thread: bool, source: TaskRecipe | bytes, cfg: ClientConfig, solver: LocalSolver,
                    threads: int, jobs: "mp.Queue", results: "mp.Queue", device: str = "cpu") -> None:
    """A training process: build the task once (on ``device``), then serve groups of jobs until
    ``None``. It dies with the process that started it
    (:func:`~asyncfl.compute.lifetime.die_with_parent`)."""
    die_with_parent(parent, by_main_thread)
    if threads:
        torch.set_num_threads(threads)
    task = _worker_task(source, device)
    versions = _WorkerVersions(device)

    while (msg := jobs.get()) is not None:
        group_id, batched, specs = msg
        try:
            group = [LocalJob(client_k, versions.get(start), versions.get(centre), mu, seed, local_steps=steps)
                     for client_k, seed, mu, start, centre, steps in specs]
            results.put((group_id, _train_group(task, cfg, solver, group, batched), None))
        except Exception as exc:  # reported on the jobs' futures, the worker keeps serving
            results.put((group_id, None, f"{type(exc).__name__}: {exc}"))


class ProcessExecutor(_GroupExecutor):
    """``workers`` spawned processes, each building the task once. A model version travels to a
    worker with its first job there and later jobs only name it; tensors travel as numpy arrays
    (by value: cheaper than shared-memory handles for client-sized models). A reader thread
    resolves the futures.

    Unbatched, every job goes at once to the worker with the fewest outstanding jobs. With
    ``run.batched`` the jobs of one flush (one model version, :class:`_Batcher`) are split into
    one contiguous group per worker and each worker trains its group in one
    ``solver.train_batched`` call: the model is sent once per version and
    worker, and the workers train while the engine goes on simulating."""

    def __init__(self, task: Task, client: ClientConfig, solver: LocalSolver, run: RunConfig,
                 recipe: TaskRecipe | None = None, device: str = "cpu") -> None:
        ctx = mp.get_context("spawn")
        self._device = torch.device(device)
        source = _task_source(task, recipe)
        self._results: mp.Queue = ctx.Queue()
        self._queues = [ctx.Queue() for _ in range(run.workers)]
        by_main_thread = threading.current_thread() is threading.main_thread()
        self._procs = [
            ctx.Process(target=_process_worker, args=(os.getpid(), by_main_thread, source, client, solver, run.torch_threads, q,
                                                          self._results, device),
                        name=f"asyncfl-train-{i}", daemon=True)
            for i, q in enumerate(self._queues)
        ]
        self._batcher = _Batcher(self._ship_groups, parts=GROUPS_PER_WORKER * run.workers) if run.batched else None
        for p in self._procs:
            p.start()
        self._keys = _VersionKeys(size=4 * WORKER_CACHE)
        self._sent: list[collections.OrderedDict[int, None]] = [collections.OrderedDict() for _ in self._procs]
        self._load = [0] * len(self._procs)
        self._futures: dict[int, tuple[list[asyncio.Future], int, asyncio.AbstractEventLoop]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="asyncfl-results", daemon=True)
        self._reader.start()
        self._closed = False

    def _spec(self, worker: int, tensor: torch.Tensor) -> tuple:
        key, array, _ = self._keys.get(tensor, lambda t: t.detach().cpu().numpy())
        sent = self._sent[worker]
        if key in sent:
            return (key,)
        sent[key] = None  # same FIFO as the worker's cache
        if len(sent) > WORKER_CACHE:
            sent.popitem(last=False)
        return (key, array)

    def _ship_groups(self, live: Pending) -> None:
        """A batch larger than a worker's share is split across the least loaded workers."""
        assert self._batcher is not None
        by_load = sorted(range(len(self._procs)), key=self._load.__getitem__)
        for worker, group in zip(by_load, self._batcher.split(live, len(self._procs))):
            self._send(group, batched=True, worker=worker)

    def _send(self, group: Pending, batched: bool, worker: int | None = None) -> None:
        group_id = next(self._ids)
        with self._lock:
            if worker is None:
                worker = min(range(len(self._load)), key=self._load.__getitem__)
            self._load[worker] += len(group)
            self._futures[group_id] = ([future for _, future in group], worker, asyncio.get_running_loop())
        specs = []
        for job, _ in group:
            start = self._spec(worker, job.start)
            centre = start if job.centre is job.start else self._spec(worker, job.centre)
            specs.append((job.client, job.seed, job.mu, start, centre, job.local_steps))
        self._queues[worker].put((group_id, batched, specs))

    def _read(self) -> None:
        while (msg := self._results.get()) is not None:
            group_id, block, error = msg
            with self._lock:
                futures, worker, loop = self._futures.pop(group_id)
                self._load[worker] -= len(futures)
            loop.call_soon_threadsafe(_resolve_group, futures, block, error, self._device)  # one wake-up per group

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._batcher is not None:
            self._batcher.clear()
        for q in self._queues:
            q.put(None)
        await asyncio.get_running_loop().run_in_executor(None, self._join)

    def _join(self) -> None:
        for p in self._procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join()
        self._results.put(None)
        self._reader.join(timeout=10)
        for q in (*self._queues, self._results):
            q.close()
            q.join_thread()


def _rows(block: np.ndarray, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The rows of a group's ``(n, d)`` result on the run's ``device``: one tensor over the
    received array (moved once), cut into row views at once, not a tensor built per job."""
    return torch.from_numpy(block).to(device).unbind(0)


def _resolve_group(futures: list[asyncio.Future], block: np.ndarray | None, error: str | None,
                   device: torch.device = torch.device("cpu")) -> None:
    """Every job's trained model is a row of the group's block (:func:`_rows`)."""
    rows = None if block is None else _rows(block, device)
    for i, future in enumerate(futures):
        _resolve(future, None if rows is None else rows[i], error)


def _resolve(future: asyncio.Future, row: torch.Tensor | None, error: str | None) -> None:
    if future.done():  # cancelled meanwhile (a straggler, or the end of the run)
        return
    if error is not None:
        future.set_exception(RuntimeError(f"local training failed in a worker process: {error}"))
    else:
        future.set_result(row)


# ---------------------------------------------------------------------------------------------
_RAY_TASKS: dict[str, Task] = {}  # per Ray worker process: tasks built so far, by source key


def _ray_train(source_key: str, source_box: list, client: ClientConfig, solver: LocalSolver, threads: int, batched: bool,
               device: str, specs: list[tuple[int, int, float, int, int, int | None]], *versions: np.ndarray) -> np.ndarray:
    """A Ray remote task: builds the task once per worker process (cached) and trains a group
    of jobs (one job unbatched; one flush's share with ``run.batched``) into an ``(n, d)`` array.
    The group's model versions are the task's own arguments (references that Ray resolves
    before the call, each once); a job names its start and centre by their index there."""
    import ray

    task = _RAY_TASKS.get(source_key)
    if task is None:
        if threads:
            torch.set_num_threads(threads)
        task = _RAY_TASKS[source_key] = _worker_task(ray.get(source_box[0]), device)
    tensors = [torch.from_numpy(v).to(device_of(task)) for v in versions]
    jobs = [LocalJob(k, tensors[start], tensors[centre], mu, seed, local_steps=steps)
            for k, seed, mu, start, centre, steps in specs]
    return _train_group(task, client, solver, jobs, batched)


class RayExecutor(_GroupExecutor):
    """Ray remote tasks. ``ray.init()`` (``num_cpus = run.workers``, on loopback) or
    ``ray.init(address=run.ray_address)`` unless Ray is already initialised (then that session
    is used and left running). Each model version is ``ray.put`` once and every task of that
    version takes the same reference as an argument; workers cache the task they build from
    the scenario.
    Unbatched, one task per job; with ``run.batched``, the jobs of one flush are split into one
    group per CPU of the cluster and each group is one task (``train_batched``)."""

    def __init__(self, task: Task, client: ClientConfig, solver: LocalSolver, run: RunConfig,
                 recipe: TaskRecipe | None = None, device: str = "cpu") -> None:
        import uuid

        if not run.ray_address:  # a local instance listens on loopback only (read when ray is imported)
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        import ray

        self._ray = ray
        self._owns = not ray.is_initialized()
        if self._owns:
            kwargs: dict[str, Any] = {"address": run.ray_address} if run.ray_address else {"num_cpus": run.workers}
            ray.init(**kwargs, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        source = _task_source(task, recipe)
        self._source = [ray.put(source)]  # boxed in a list: workers fetch it only on a cache miss
        self._source_key = uuid.uuid4().hex
        self._client, self._solver = client, solver
        self._threads, self._device = run.torch_threads, device
        self._remote = ray.remote(num_cpus=1, max_retries=0)(_ray_train)
        self._keys = _VersionKeys(size=16)
        self._slots = max(1, int(ray.cluster_resources().get("CPU", run.workers))) if run.batched else 1
        self._batcher = _Batcher(self._groups, parts=GROUPS_PER_WORKER * self._slots) if run.batched else None

    def _groups(self, live: Pending) -> None:
        assert self._batcher is not None
        for group in self._batcher.split(live, self._slots):
            self._send(group, batched=True)

    def _send(self, group: Pending, batched: bool) -> None:
        put = lambda t: self._ray.put(t.detach().cpu().numpy())  # noqa: E731
        versions: dict[int, tuple[int, Any]] = {}  # version key → (argument index, reference)

        def index(tensor: torch.Tensor) -> int:
            key, ref, _ = self._keys.get(tensor, put)
            return versions.setdefault(key, (len(versions), ref))[0]

        specs = []
        for job, _ in group:
            start = index(job.start)
            centre = start if job.centre is job.start else index(job.centre)
            specs.append((job.client, job.seed, job.mu, start, centre, job.local_steps))
        # the versions as top-level arguments, not references nested in the specs: Ray resolves
        # them before the call (no ray.get inside the task) and tracks one borrowed reference
        # per version instead of two per job
        ref = self._remote.remote(self._source_key, self._source, self._client, self._solver, self._threads, batched,
                                  self._device, specs, *(r for _, r in versions.values()))
        futures, device = [future for _, future in group], torch.device(self._device)
        asyncio.wrap_future(ref.future()).add_done_callback(lambda f: _copy_rows(f, futures, device))

    async def aclose(self) -> None:
        if self._batcher is not None:
            self._batcher.clear()
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()


def _copy_rows(src: asyncio.Future, dsts: list[asyncio.Future], device: torch.device = torch.device("cpu")) -> None:
    """Resolve each job's future with its row of the group's ``(n, d)`` result, on ``device``."""
    if not src.cancelled():  # retrieve the outcome even if every job was cancelled meanwhile, or
        error = src.exception()  # asyncio logs "exception never retrieved" (ray.shutdown() fails pending tasks)
    block = np.array(src.result()) if not src.cancelled() and error is None else None  # a writable copy of Ray's buffer
    rows = None if block is None else _rows(block, device)  # row views, cut at once
    for i, dst in enumerate(dsts):
        if dst.done():  # cancelled (a straggler, the end of the run)
            continue
        if src.cancelled():
            dst.cancel()
        elif error is not None:
            dst.set_exception(error)
        else:
            dst.set_result(rows[i])


# ---------------------------------------------------------------------------------------------
# The executors a scenario can name: each ``build(cfg, ctx: ExecutorContext) -> Executor`` is an
# executor component (asyncfl.components.builtin).
class ExecutorContext(NamedTuple):
    """What an executor's builder is told (docs/architecture.md §4): the built task, the
    ``[client]`` section its solver reads, the solver ``client.solver`` names at the run's
    precision (``run.precision``: for bf16 wrapped to train under autocast,
    :func:`asyncfl.compute.precision.at_precision`; workers receive it pickled), the ``[run]``
    section (``run.workers``, ``run.batched``, …), how a worker rebuilds the task (None: the
    task was given by hand, workers receive its data) and the device the run computes on (the
    task's; ``run.device`` resolved, :mod:`asyncfl.compute.device`)."""

    task: Task
    client: ClientConfig
    solver: LocalSolver
    run: RunConfig
    recipe: TaskRecipe | None = None
    device: str = "cpu"


def build_inline(cfg: None, ctx: ExecutorContext) -> Executor:
    """``inline``: :class:`InlineExecutor`, or :class:`BatchedExecutor` with ``run.batched``."""
    task, client, solver = ctx.task, ctx.client, ctx.solver
    return BatchedExecutor(task, client, solver) if ctx.run.batched else InlineExecutor(task, client, solver)


def build_threads(cfg: None, ctx: ExecutorContext) -> Executor:
    """``threads``: :class:`ThreadExecutor` with ``run.workers`` threads."""
    return ThreadExecutor(ctx.task, ctx.client, ctx.solver, ctx.run.workers)


def build_processes(cfg: None, ctx: ExecutorContext) -> Executor:
    """``processes``: :class:`ProcessExecutor` with ``run.workers`` processes."""
    return ProcessExecutor(ctx.task, ctx.client, ctx.solver, ctx.run, ctx.recipe, ctx.device)


def build_ray(cfg: None, ctx: ExecutorContext) -> Executor:
    """``ray``: :class:`RayExecutor`; a :class:`ScenarioError` when Ray is not installed."""
    try:
        import ray  # noqa: F401  (an optional dependency)
    except ImportError:
        raise ScenarioError([
            f"run.executor = {ctx.run.executor!r}: Ray is not installed; install it with "
            "`pip install asyncfl[ray]` (or choose inline, threads or processes)"
        ]) from None
    return RayExecutor(ctx.task, ctx.client, ctx.solver, ctx.run, ctx.recipe, ctx.device)
