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
               is put in the object store once, jobs pass its reference
=============  ==========================================================================

The names are registered in :data:`asyncfl.config.registries.EXECUTORS` (docs/architecture.md);
:func:`make_executor` builds the one ``run.executor`` names.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures as cf
import copy
import ctypes
import dataclasses
import itertools
import multiprocessing as mp
import os
import pickle
import queue
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Protocol

import numpy as np
import torch

from asyncfl.compute.training import LocalJob, local_train, train_batched
from asyncfl.errors import ScenarioError
from asyncfl.tasks.base import Task

if TYPE_CHECKING:
    from asyncfl.config.scenario import ClientConfig, RunConfig


class Executor(Protocol):
    def submit(self, job: LocalJob) -> "asyncio.Future[torch.Tensor]": ...

    async def aclose(self) -> None: ...


class InlineExecutor:
    """Trains when the result is first needed (at flush), in the event loop's thread."""

    def __init__(self, task: Task, client: ClientConfig) -> None:
        self.task, self.client = task, client

    def submit(self, job: LocalJob) -> "asyncio.Future[torch.Tensor]":
        loop = asyncio.get_running_loop()
        return loop.create_task(self._run(job))

    async def _run(self, job: LocalJob) -> torch.Tensor:
        return local_train(self.task, self.client, job)

    async def aclose(self) -> None:
        return None


class BatchedExecutor:
    """Inline, but batched: every job submitted and not yet computed when the event loop first
    gets control (the flush) is trained in one :func:`~asyncfl.compute.training.train_batched` call, so
    clients of one model version share batched gradient steps. Cancelled jobs are skipped.
    Jobs are plain futures resolved by one scheduled callback (no task per job)."""

    def __init__(self, task: Task, client: ClientConfig) -> None:
        self.task, self.client = task, client
        self._pending: list[tuple[LocalJob, asyncio.Future[torch.Tensor]]] = []
        self.batches: list[int] = []  # size of every batch trained (for benchmarks and tests)

    def submit(self, job: LocalJob) -> "asyncio.Future[torch.Tensor]":
        loop = asyncio.get_running_loop()
        future: asyncio.Future[torch.Tensor] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._train_pending)
        self._pending.append((job, future))
        return future

    def _train_pending(self) -> None:
        live = [(job, future) for job, future in self._pending if not future.done()]
        self._pending = []
        if not live:
            return
        self.batches.append(len(live))
        try:
            results = train_batched(self.task, self.client, [job for job, _ in live])
        except Exception as exc:  # surfaces where the futures are awaited
            for _, future in live:
                future.set_exception(exc)
            return
        for (_, future), theta in zip(live, results):
            future.set_result(theta)

    async def aclose(self) -> None:
        self._pending = []


class ThreadExecutor:
    """Trains in a thread pool as soon as the job is dispatched (torch releases the GIL).

    Every worker thread trains on its own copy of the model: ``torch.func.functional_call``
    swaps the module's parameters in place while it runs, so two threads (or a thread and the
    evaluation in the event loop) sharing one module would compute with each other's weights.
    """

    def __init__(self, task: Task, client: ClientConfig, workers: int) -> None:
        self.task, self.client = task, client
        self.pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="asyncfl-train")
        self._local = threading.local()

    def _thread_task(self) -> Task:
        task = getattr(self._local, "task", None)
        if task is None:
            task = self._local.task = dataclasses.replace(self.task, model=copy.deepcopy(self.task.model))
        return task

    def _train(self, job: LocalJob) -> torch.Tensor:
        return local_train(self._thread_task(), self.client, job)

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
    """How a worker rebuilds the run's task instead of receiving its data: ``build(cfg,
    num_clients, seed)`` with the task's registered builder (pickled by reference) and its
    validated ``[task]`` section. Same arguments ⇒ the same task, bit for bit."""

    build: Callable[[Any, int, int], Task]
    cfg: Any
    num_clients: int
    seed: int


def _build_source(source: TaskRecipe | bytes) -> Task:
    """A task from what the parent sent: a :class:`TaskRecipe`, or the pickled task itself (a
    task passed to :class:`~asyncfl.sim.engine.Simulation` by hand)."""
    if isinstance(source, bytes):
        return pickle.loads(source)
    return source.build(source.cfg, source.num_clients, source.seed)


def _task_source(task: Task, recipe: TaskRecipe | None) -> TaskRecipe | bytes:
    return recipe if recipe is not None else pickle.dumps(task)


# ---------------------------------------------------------------------------------------------
WORKER_CACHE = 8  # model versions a process worker keeps (FIFO, mirrored by the parent)
PARENT_POLL_S = 1.0  # how often an idle worker checks that its parent is alive
_PR_SET_PDEATHSIG = 1
_IDLE = object()


def _die_with_parent(parent: int, by_main_thread: bool) -> None:
    """Make this worker end when the process that started it (``parent``) dies, however it dies
    (SIGKILL included): otherwise the worker, re-parented, would wait for jobs forever.

    On Linux, ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, when the parent's main thread started the
    worker (the signal follows the death of the starting *thread*); then, everywhere, if the
    parent is already gone, exit now. The job loop also checks ``os.getppid()`` every
    :data:`PARENT_POLL_S` seconds while idle (:func:`_process_worker`)."""
    if sys.platform.startswith("linux") and by_main_thread:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(0)


def _process_worker(source: TaskRecipe | bytes, cfg: ClientConfig, threads: int, jobs: "mp.Queue", results: "mp.Queue",
                    parent: int | None = None, by_main_thread: bool = False) -> None:
    """A training process: build the task once, then serve jobs until ``None``, or until the
    parent process (pid ``parent``) is gone (:func:`_die_with_parent`)."""
    if parent is not None:
        _die_with_parent(parent, by_main_thread)
    if threads:
        torch.set_num_threads(threads)
    task = _build_source(source)
    versions: collections.OrderedDict[int, torch.Tensor] = collections.OrderedDict()

    def tensor(spec: tuple) -> torch.Tensor:
        if len(spec) == 2:  # (key, array): a version this worker has not seen yet
            versions[spec[0]] = torch.from_numpy(spec[1])
            if len(versions) > WORKER_CACHE:
                versions.popitem(last=False)
            return versions[spec[0]]
        return versions[spec[0]]

    while True:
        try:
            msg = jobs.get(timeout=PARENT_POLL_S)
        except queue.Empty:
            msg = _IDLE
        if parent is not None and os.getppid() != parent:
            os._exit(0)  # orphaned: nobody reads the results (and a normal exit would wait on the queue)
        if msg is _IDLE:
            continue
        if msg is None:
            break
        job_id, client_k, seed, mu, start, centre = msg
        try:
            job = LocalJob(client_k, tensor(start), tensor(centre), mu, seed)
            results.put((job_id, local_train(task, cfg, job).numpy(), None))
        except Exception as exc:  # reported on the job's future, the worker keeps serving
            results.put((job_id, None, f"{type(exc).__name__}: {exc}"))


class ProcessExecutor:
    """``workers`` spawned processes, each building the task once. Jobs go to the worker with
    the fewest outstanding jobs; a model version travels to a worker with its first job there
    and later jobs only name it. Tensors travel as numpy arrays (by value: cheaper than shared
    memory handles for client-sized models). A reader thread resolves the futures."""

    def __init__(self, task: Task, client: ClientConfig, run: RunConfig, recipe: TaskRecipe | None = None) -> None:
        ctx = mp.get_context("spawn")
        source = _task_source(task, recipe)
        self._results: mp.Queue = ctx.Queue()
        self._queues = [ctx.Queue() for _ in range(run.workers)]
        by_main_thread = threading.current_thread() is threading.main_thread()
        self._procs = [
            ctx.Process(target=_process_worker, args=(source, client, run.torch_threads, q, self._results, os.getpid(), by_main_thread),
                        name=f"asyncfl-train-{i}", daemon=True)
            for i, q in enumerate(self._queues)
        ]
        for p in self._procs:
            p.start()
        self._keys = _VersionKeys(size=4 * WORKER_CACHE)
        self._sent: list[collections.OrderedDict[int, None]] = [collections.OrderedDict() for _ in self._procs]
        self._load = [0] * len(self._procs)
        self._futures: dict[int, tuple[asyncio.Future, int, asyncio.AbstractEventLoop]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="asyncfl-results", daemon=True)
        self._reader.start()
        self._closed = False

    def _spec(self, worker: int, tensor: torch.Tensor) -> tuple:
        key, array, _ = self._keys.get(tensor, lambda t: t.detach().numpy())
        sent = self._sent[worker]
        if key in sent:
            return (key,)
        sent[key] = None  # same FIFO as the worker's cache
        if len(sent) > WORKER_CACHE:
            sent.popitem(last=False)
        return (key, array)

    def submit(self, job: LocalJob) -> "asyncio.Future[torch.Tensor]":
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        job_id = next(self._ids)
        with self._lock:
            worker = min(range(len(self._load)), key=self._load.__getitem__)
            self._load[worker] += 1
            self._futures[job_id] = (future, worker, loop)
        start = self._spec(worker, job.start)
        centre = start if job.centre is job.start else self._spec(worker, job.centre)
        self._queues[worker].put((job_id, job.client, job.seed, job.mu, start, centre))
        return future

    def _read(self) -> None:
        while (msg := self._results.get()) is not None:
            job_id, array, error = msg
            with self._lock:
                future, worker, loop = self._futures.pop(job_id)
                self._load[worker] -= 1
            loop.call_soon_threadsafe(_resolve, future, array, error)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
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


def _resolve(future: asyncio.Future, array: np.ndarray | None, error: str | None) -> None:
    if future.done():  # cancelled meanwhile (a straggler, or the end of the run)
        return
    if error is not None:
        future.set_exception(RuntimeError(f"local training failed in a worker process: {error}"))
    else:
        future.set_result(torch.from_numpy(array))


# ---------------------------------------------------------------------------------------------
_RAY_TASKS: dict[str, Task] = {}  # per Ray worker process: tasks built so far, by source key


def _ray_train(source_key: str, source_box: list, client: ClientConfig, threads: int, client_k: int, seed: int,
               mu: float, start: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """A Ray remote task: builds the task once per worker process (cached), trains one job."""
    task = _RAY_TASKS.get(source_key)
    if task is None:
        import ray

        if threads:
            torch.set_num_threads(threads)
        task = _RAY_TASKS[source_key] = _build_source(ray.get(source_box[0]))
    job = LocalJob(client_k, torch.from_numpy(start), torch.from_numpy(centre), mu, seed)
    return local_train(task, client, job).numpy()


class RayExecutor:
    """Ray remote tasks. ``ray.init()`` (``num_cpus = run.workers``) or
    ``ray.init(address=run.ray_address)`` unless Ray is already initialised (then that session
    is used and left running). Each model version is ``ray.put`` once and every job of that
    version passes the same reference; workers cache the task they build from the scenario."""

    def __init__(self, task: Task, client: ClientConfig, run: RunConfig, recipe: TaskRecipe | None = None) -> None:
        import uuid

        import ray

        self._ray = ray
        self._owns = not ray.is_initialized()
        if self._owns:
            kwargs: dict[str, Any] = {"address": run.ray_address} if run.ray_address else {"num_cpus": run.workers}
            ray.init(**kwargs, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        source = _task_source(task, recipe)
        self._source = [ray.put(source)]  # boxed in a list: workers fetch it only on a cache miss
        self._source_key = uuid.uuid4().hex
        self._client = client
        self._threads = run.torch_threads
        self._remote = ray.remote(num_cpus=1, max_retries=0)(_ray_train)
        self._keys = _VersionKeys(size=16)
        self._refs: list = []

    def submit(self, job: LocalJob) -> "asyncio.Future[torch.Tensor]":
        put = lambda t: self._ray.put(t.detach().numpy())  # noqa: E731
        start = self._keys.get(job.start, put)[1]
        centre = start if job.centre is job.start else self._keys.get(job.centre, put)[1]
        ref = self._remote.remote(self._source_key, self._source, self._client, self._threads,
                                  job.client, job.seed, job.mu, start, centre)
        future = asyncio.get_running_loop().create_future()
        asyncio.wrap_future(ref.future()).add_done_callback(lambda f: _copy_result(f, future))
        return future

    async def aclose(self) -> None:
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()


def _copy_result(src: asyncio.Future, dst: asyncio.Future) -> None:
    if dst.done():  # cancelled (a straggler, the end of the run): the Ray task's outcome is moot,
        if not src.cancelled():  # but retrieve it, or asyncio logs "exception never retrieved"
            src.exception()  # (workers killed by ray.shutdown() fail their pending tasks)
        return
    if src.cancelled():
        dst.cancel()
    elif src.exception() is not None:
        dst.set_exception(src.exception())
    else:
        dst.set_result(torch.from_numpy(np.array(src.result())))  # a writable copy of Ray's buffer


# ---------------------------------------------------------------------------------------------
# The executors a scenario can name: each ``build(task, client, run, recipe) -> Executor`` is
# registered under its ``run.executor`` name in asyncfl.config.registries.EXECUTORS.
def build_inline(task: Task, client: ClientConfig, run: RunConfig, recipe: TaskRecipe | None) -> Executor:
    """``inline``: :class:`InlineExecutor`, or :class:`BatchedExecutor` with ``run.batched``."""
    return BatchedExecutor(task, client) if run.batched else InlineExecutor(task, client)


def build_threads(task: Task, client: ClientConfig, run: RunConfig, recipe: TaskRecipe | None) -> Executor:
    """``threads``: :class:`ThreadExecutor` with ``run.workers`` threads."""
    return ThreadExecutor(task, client, run.workers)


def build_processes(task: Task, client: ClientConfig, run: RunConfig, recipe: TaskRecipe | None) -> Executor:
    """``processes``: :class:`ProcessExecutor` with ``run.workers`` processes."""
    return ProcessExecutor(task, client, run, recipe)


def build_ray(task: Task, client: ClientConfig, run: RunConfig, recipe: TaskRecipe | None) -> Executor:
    """``ray``: :class:`RayExecutor`; a :class:`ScenarioError` when Ray is not installed."""
    try:
        import ray  # noqa: F401  (an optional dependency)
    except ImportError:
        raise ScenarioError([
            f"run.executor = {run.executor!r}: Ray is not installed; install it with "
            "`pip install asyncfl[ray]` (or choose inline, threads or processes)"
        ]) from None
    return RayExecutor(task, client, run, recipe)
