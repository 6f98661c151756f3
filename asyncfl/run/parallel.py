"""Many runs at once: the runner behind ``asyncfl sweep`` and every study script built on the
experiment engine (docs/architecture.md §9).

A :class:`RunJob` is a scenario and the run directory it goes to. :func:`run_jobs` runs a list
of them on a :class:`Backend` and reports each :class:`RunOutcome` as it finishes:

* :class:`InProcess` — one after another in this process (``--workers 1``);
* :class:`ProcessPool` — ``N`` worker processes on this machine (forked on Linux, inheriting
  the driver's torch), each running job after job; they write their run directories directly;
* :class:`RayPool` — a fixed pool of Ray actors, one per CPU, on a local instance
  (``--ray auto``) or an existing cluster (``--ray ADDRESS``), each importing torch once and
  running job after job. A Ray worker may run on a node that does not share this filesystem,
  so it runs in a temporary directory of its own and sends the run directory's files back; the
  driver writes them (:func:`run_shipped`). For a resume the driver sends the files it has.

Every job does exactly what ``asyncfl run`` / ``asyncfl resume`` would do for that directory
(:func:`run_job`): a completed, diverged or stalled run is read back, not run again; a run with
a checkpoint is resumed from it; a run killed before its first checkpoint restarts in place. So
each run's files are the files of that point run alone (wall times aside), and rerunning a
killed sweep resumes it. A run that diverges or fails is an outcome with its status and message;
it never stops the others.

Worker processes die with the driver (:func:`asyncfl.compute.lifetime.die_with_parent`; Ray
ends a dead driver's actors, and a local instance with it): a killed sweep leaves no process
behind.
"""

from __future__ import annotations

import collections
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Protocol

from asyncfl.compute.lifetime import die_with_parent
from asyncfl.config.scenario import Scenario
from asyncfl.config.stop import FINISHED_STATUSES
from asyncfl.errors import AsyncFLError, NumericalFault, RunDirError, SimulationStalled, UsageError
from asyncfl.run import runner
from asyncfl.run.reuse import stale_reason
from asyncfl.run.rundir import atomic_write, read_json

#: statuses after which a run is not run again
FINAL_STATUSES = (*FINISHED_STATUSES, "diverged", "stalled")


class RunJob(NamedTuple):
    """One run: ``scenario`` into the directory ``out`` (named ``name`` in tables). ``after``
    (a module-level function, so that it travels to a worker) is called with the run directory
    once the run has ended, whatever its status (``asyncfl sweep`` draws ``metrics.png`` there,
    as ``asyncfl run`` does)."""

    name: str
    scenario: Scenario
    out: Path
    after: Callable[[Path], None] | None = None


class RunOutcome(NamedTuple):
    """How a job ended: ``status`` (completed, diverged, stalled, failed, interrupted), a
    one-line ``message`` for anything but completed, its ``summary.json`` (``{}`` if none), the
    wall time spent on it in this call (0 when it was read back), and ``reused`` when the run
    directory already held a finished run."""

    name: str
    out: Path
    status: str
    message: str
    summary: dict[str, Any]
    wall: float
    reused: bool = False


def read_summary(out: Path) -> dict[str, Any]:
    """A run directory's ``summary.json`` (``{}`` when it has none or it is damaged)."""
    try:
        data = read_json(Path(out) / "summary.json")
    except (OSError, RunDirError):
        return {}
    return data if isinstance(data, dict) else {}


def run_job(job: RunJob) -> RunOutcome:
    """Run, resume or read back ``job``'s directory (see the module docstring)."""
    start = time.perf_counter()
    out = Path(job.out)
    done = read_summary(out)
    recorded = (out / "scenario.toml").is_file()
    stale = stale_reason(out, job.scenario, done) if recorded else None  # never reuse another scenario's run
    if stale is None and done.get("status") in FINAL_STATUSES and recorded:
        if job.after is not None:  # idempotent: a run killed between its summary and this completes here
            job.after(out)
        return RunOutcome(job.name, out, done["status"], str(done.get("error", "")), done, 0.0, True)
    status, message = "completed", f"run again: the run found was {stale}" if stale else ""
    try:
        if stale is not None:  # its files are replaced (only a run directory's files: anything else is refused)
            runner.run_to_dir_blocking(job.scenario, out, overwrite=True)
        elif recorded:
            runner.resume_dir_blocking(out)
        else:
            runner.run_to_dir_blocking(job.scenario, out, overwrite=True)
    except runner.AlreadyCompleted:
        pass
    except NumericalFault as exc:
        status, message = "diverged", str(exc)
    except SimulationStalled as exc:
        status, message = "stalled", str(exc)
    except AsyncFLError as exc:
        status, message = "failed", str(exc).replace("\n", " ")
    except Exception as exc:  # a bug or a worker crash: recorded, the other runs go on
        where = traceback.extract_tb(exc.__traceback__)[-1]
        status, message = "failed", f"{type(exc).__name__}: {exc} ({Path(where.filename).name}:{where.lineno})"
    summary = read_summary(out)
    if status == "completed" and summary.get("status") not in (None, "completed"):
        status = str(summary["status"])
    if job.after is not None and (out / "metrics.csv").is_file():
        job.after(out)
    return RunOutcome(job.name, out, status, message, summary, time.perf_counter() - start)


# ---------------------------------------------------------------------------------------------
# shipping a run directory (a cluster without a shared filesystem)
SHIPPED_LIMIT = 2**30  # bytes of one run directory sent either way


#: the one sub-folder of a run directory that travels with it (run.tensorboard = true)
SHIPPED_FOLDER = "tensorboard"


def pack(out: Path) -> dict[str, bytes]:
    """The files of a run directory (not its temporaries), by name, and those of its
    ``tensorboard/`` folder as ``tensorboard/NAME``."""
    out = Path(out)
    if not out.is_dir():
        return {}
    files = {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file() and not p.name.startswith(".")}
    sub = out / SHIPPED_FOLDER
    if sub.is_dir() and not sub.is_symlink():
        files.update({f"{SHIPPED_FOLDER}/{p.name}": p.read_bytes() for p in sorted(sub.iterdir())
                      if p.is_file() and not p.name.startswith(".")})
    if sum(map(len, files.values())) > SHIPPED_LIMIT:
        raise RunDirError(f"{out}: more than {SHIPPED_LIMIT} bytes to send to a worker")
    return files


def unpack(files: dict[str, bytes], out: Path) -> None:
    """Write ``files`` into ``out`` atomically, file by file, and remove the files of ``out``
    that ``files`` does not hold (the worker's directory is the run's directory)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in files:
        folder, _, leaf = name.rpartition("/")
        if folder not in ("", SHIPPED_FOLDER) or not leaf or leaf.startswith(".") or "\\" in name or leaf in ("..", "."):
            raise RunDirError(f"a worker sent a file named {name!r}")
    if any(name.startswith(SHIPPED_FOLDER + "/") for name in files):
        (out / SHIPPED_FOLDER).mkdir(exist_ok=True)
    for name, data in files.items():
        atomic_write(out / name, lambda p, data=data: p.write_bytes(data))
    for folder in (out, out / SHIPPED_FOLDER):
        if not folder.is_dir() or folder.is_symlink():
            continue
        for p in folder.iterdir():
            rel = p.name if folder == out else f"{SHIPPED_FOLDER}/{p.name}"
            if p.is_file() and not p.name.startswith(".") and rel not in files:
                p.unlink()


def run_shipped(job: RunJob, files: dict[str, bytes]) -> tuple[RunOutcome, dict[str, bytes]]:
    """:func:`run_job` in a private temporary directory seeded with ``files`` (what the driver
    holds of the run directory); returns the outcome and the finished directory's files."""
    with tempfile.TemporaryDirectory(prefix="asyncfl-run-") as tmp:
        local = Path(tmp) / "run"
        if files:
            unpack(files, local)
        outcome = run_job(job._replace(out=local))
        return outcome._replace(out=Path(job.out)), pack(local)


# ---------------------------------------------------------------------------------------------
# backends
class Backend(Protocol):
    """Where the jobs run. ``slots`` is how many run at once."""

    slots: int

    def run(self, jobs: list[RunJob]) -> Iterator[RunOutcome]:
        """Run every job, yielding outcomes in the order they finish."""
        ...

    def close(self) -> None: ...


class InProcess:
    """One job after another, in this process."""

    slots = 1

    def run(self, jobs: list[RunJob]) -> Iterator[RunOutcome]:
        for job in jobs:
            yield run_job(job)

    def close(self) -> None:
        return None


def _worker_init(parent: int, by_main_thread: bool, threads: int) -> None:
    die_with_parent(parent, by_main_thread)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))


#: how pool workers start: forked on Linux, where a fork inherits the driver's imported modules
#: (torch among them) instead of importing them again (≈ 2–3 s a worker, most of a short
#: sweep's overhead); spawned elsewhere. A run is a pure function of its job, so the start
#: method never changes a result.
START_METHOD = "fork" if sys.platform.startswith("linux") else "spawn"


class ProcessPool:
    """``workers`` processes on this machine (:data:`START_METHOD`; they die with this one), each
    running one job at a time, sent to it over a pipe when it is free.

    A worker that dies (killed, out of memory) fails the one job it held, with its exit signal
    in the message; it is replaced, and every other job runs or completes as usual (a pool of
    :mod:`concurrent.futures` would instead break, failing every job not yet finished)."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise UsageError(f"--workers {workers}: must be at least 1")
        self.slots = workers
        self._ctx = mp.get_context(START_METHOD)
        self._workers: list[_Worker] = []

    def _start(self) -> "_Worker":
        ours, theirs = self._ctx.Pipe()
        process = self._ctx.Process(target=_worker_main, daemon=True, args=(
            theirs, os.getpid(), threading.current_thread() is threading.main_thread()))
        process.start()
        theirs.close()
        worker = _Worker(process, ours)
        self._workers.append(worker)
        return worker

    def _retire(self, worker: "_Worker") -> None:
        self._workers.remove(worker)
        worker.conn.close()
        worker.process.join(timeout=5)

    def run(self, jobs: list[RunJob]) -> Iterator[RunOutcome]:
        queue = collections.deque(jobs)
        idle = [w for w in self._workers]
        busy: dict[Any, tuple[_Worker, RunJob]] = {}  # the worker's pipe → (worker, its job)
        while queue or busy:
            while queue and (idle or len(self._workers) < self.slots):
                worker = idle.pop() if idle else self._start()
                job = queue.popleft()
                try:
                    worker.conn.send(job)
                except (OSError, ValueError):  # it died while idle: replace it, the job waits for the next
                    self._retire(worker)
                    queue.appendleft(job)
                    continue
                busy[worker.conn] = (worker, job)
            sentinels = {w.process.sentinel: conn for conn, (w, _) in busy.items()}
            for ready in mp_connection.wait([*busy, *sentinels]):
                conn = sentinels.get(ready, ready)
                if conn not in busy:
                    continue  # both its pipe and its sentinel were ready: handled
                worker, job = busy.pop(conn)
                try:
                    outcome = conn.recv() if conn.poll() else None
                except (EOFError, OSError):
                    outcome = None
                if outcome is None:  # the process died holding the job: that job alone fails
                    worker.process.join(timeout=5)
                    code = worker.process.exitcode
                    how = (f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}")
                    self._retire(worker)
                    yield _failed(job, f"worker process lost ({how}) while running it; rerun the command to resume it")
                    continue
                idle.append(worker)
                yield outcome

    def close(self) -> None:
        for worker in list(self._workers):
            try:
                worker.conn.send(None)
            except (OSError, ValueError):
                pass
        for worker in list(self._workers):
            worker.process.join(timeout=2)
            if worker.process.is_alive():
                worker.process.terminate()
                worker.process.join(timeout=5)
            worker.conn.close()
        self._workers = []


class _Worker(NamedTuple):
    process: Any
    conn: Any


def _worker_main(conn: Any, parent: int, by_main_thread: bool) -> None:
    """A pool worker: run each job sent until ``None`` (or the pipe closes)."""
    _worker_init(parent, by_main_thread, 1)
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if job is None:
            return
        try:
            outcome = run_job(job)
        except BaseException as exc:  # noqa: BLE001 - reported as the job's failure, the worker goes on
            outcome = _failed(job, f"{type(exc).__name__}: {exc}")
            if isinstance(exc, KeyboardInterrupt):
                outcome = outcome._replace(status="interrupted")
        try:
            conn.send(outcome)
        except (OSError, ValueError):
            return


RAY_CONNECT_TIMEOUT = 30.0  # seconds to reach a cluster given by address before giving up
RAY_PROBE_TIMEOUT = 5.0  # seconds a listener has to answer the gRPC handshake


class RunWorker:
    """A long-lived Ray actor (one CPU) that runs job after job (:func:`run_shipped`). Ray
    imports this module to build it — asyncfl and torch with it — once per actor, as soon as
    the pool is created, so the first job does not pay the import."""

    def ready(self) -> int:
        return os.getpid()

    def run(self, job: RunJob, files: dict[str, bytes]) -> tuple[RunOutcome, dict[str, bytes]]:
        return run_shipped(job, files)


class RayPool:
    """A fixed pool of :class:`RunWorker` actors, one per CPU of the cluster, on a local instance
    (``address = "auto"``: started here with ``cpus`` CPUs, and stopped at :meth:`close`) or on
    the cluster at ``address``. The actors are created, and import torch, when the pool is;
    each then has one job in flight at a time: a job's run directory is packed (:func:`pack`)
    only when an actor is free for it, and the files that come back are written here
    (:func:`run_shipped`).

    An actor that dies (its process or node lost) fails its job alone and is replaced; a job
    whose directory cannot be sent fails alone. The actors belong to this driver: :meth:`close`
    kills them (a cluster given by address stays up), and Ray ends them, and a local instance
    with every process of it, when the driver exits or is killed."""

    def __init__(self, address: str, cpus: int | None = None) -> None:
        if address == "auto":  # a local instance listens on loopback only (read when ray is imported)
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        try:
            import ray
        except ImportError:
            raise UsageError("--ray: Ray is not installed; install it with: pip install 'asyncfl[ray]'") from None
        self._ray = ray
        self._owns = False
        if not ray.is_initialized():
            if address == "auto":
                # "local": a new local instance even where RAY_ADDRESS names a cluster (as on managed
                # clusters), which ray.init() would join instead, refusing num_cpus with a traceback
                ray.init(address="local", num_cpus=cpus, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
            else:
                _check_reachable(address)
                ray.init(address=address, logging_level="ERROR", log_to_driver=False)
            self._owns = True
        self.slots = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._worker = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(RunWorker)
        self._actors: list[Any] = []  # every actor started and not known dead
        self._starting: dict[Any, Any] = {}  # ready() reference → actor still importing
        self._idle: list[Any] = []
        self._start_error = ""
        self._top_up()

    def _top_up(self) -> None:
        while len(self._actors) < self.slots:
            actor = self._worker.remote()
            self._actors.append(actor)
            self._starting[actor.ready.remote()] = actor

    def _drop(self, actor: Any) -> None:
        self._actors.remove(actor)
        try:
            self._ray.kill(actor)
        except Exception:  # already gone
            pass

    def run(self, jobs: list[RunJob]) -> Iterator[RunOutcome]:
        ray = self._ray
        queue = collections.deque(jobs)
        running: dict[Any, tuple[RunJob, Any]] = {}  # run() reference → its job and actor
        self._top_up()
        while queue or running:
            while queue and self._idle:
                job = queue.popleft()
                try:
                    files = pack(Path(job.out))
                except (OSError, RunDirError) as exc:
                    yield _failed(job, f"could not send the run directory to a Ray worker: {exc}")
                    continue
                actor = self._idle.pop()
                running[actor.run.remote(job, files)] = (job, actor)
            if not running and not self._starting:
                for job in queue:  # every actor failed to start
                    yield _failed(job, f"no Ray worker could start: {self._start_error}")
                return
            [ref], _ = ray.wait([*running, *self._starting], num_returns=1)
            if ref in self._starting:
                actor = self._starting.pop(ref)
                try:
                    ray.get(ref)
                    self._idle.append(actor)
                except Exception as exc:  # it never started (on a cluster: asyncfl missing on its node, say)
                    self._start_error = f"{type(exc).__name__}: {exc}"
                    self._drop(actor)
                continue
            job, actor = running.pop(ref)
            try:
                outcome, files = ray.get(ref)
                unpack(files, Path(job.out))
                self._idle.append(actor)
            except ray.exceptions.RayActorError as exc:  # its process or node died
                self._drop(actor)
                self._top_up()
                outcome = _failed(job, f"Ray worker lost: {type(exc).__name__}: {exc}")
            except Exception as exc:  # the job's files did not come back
                self._idle.append(actor)
                outcome = _failed(job, f"Ray task lost: {type(exc).__name__}: {exc}")
            yield outcome

    def close(self) -> None:
        ray = self._ray
        if ray.is_initialized():
            for actor in list(self._actors):
                self._drop(actor)
        self._starting, self._idle = {}, []
        if self._owns and ray.is_initialized():
            ray.shutdown()


def _failed(job: RunJob, message: str) -> RunOutcome:
    """A job that no worker finished: failed, with what its directory holds."""
    return RunOutcome(job.name, Path(job.out), "failed", message, read_summary(Path(job.out)), 0.0)


def _check_reachable(address: str) -> None:
    """Refuse, within :data:`RAY_CONNECT_TIMEOUT`, an address whose host:port does not answer
    (``ray.init`` itself can wait for minutes)."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--ray {address}: expected 'auto' or HOST:PORT (the cluster's GCS address, e.g. 10.0.0.5:6379)")
    try:
        with socket.create_connection((host, int(port)), timeout=min(RAY_CONNECT_TIMEOUT, 5.0)) as sock:
            # Ray's GCS (and its client server) speak gRPC, i.e. HTTP/2: after the client's
            # connection preface the server sends a SETTINGS frame (type 4). Anything else — a
            # web server, a database, a program that says nothing — is not a Ray cluster, and
            # ray.init would wait on it for minutes.
            sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
            sock.settimeout(RAY_PROBE_TIMEOUT)
            head = b""
            while len(head) < 9:
                chunk = sock.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
    except socket.timeout:
        raise UsageError(f"--ray {address}: a program listens there but is not a Ray cluster (it did not answer as one "
                         f"within {RAY_PROBE_TIMEOUT:g} s)") from None
    except OSError as exc:
        raise UsageError(f"--ray {address}: no Ray cluster answers there ({exc.strerror or exc})") from None
    if len(head) < 9 or head[3] != 4:
        raise UsageError(f"--ray {address}: a program listens there but is not a Ray cluster (it does not speak gRPC); "
                         "give the address 'ray start --head' printed")


def make_backend(workers: int | None = None, ray: str | None = None) -> Backend:
    """``--ray ADDRESS|auto`` → :class:`RayPool`; else ``--workers N`` (default: the machine's
    cores) → :class:`ProcessPool`, or :class:`InProcess` for one worker."""
    if ray is not None:
        return RayPool(ray, cpus=workers)
    n = workers if workers is not None else (os.cpu_count() or 1)
    return InProcess() if n == 1 else ProcessPool(n)


# ---------------------------------------------------------------------------------------------
@dataclass
class Progress:
    """Counts the driver reports while jobs run."""

    total: int
    done: int = 0
    failed: int = 0
    reused: int = 0
    run_wall: list[float] = field(default_factory=list)

    def eta(self, running: int) -> float:
        """Seconds left: the mean wall time of the runs done here × runs left ÷ slots."""
        left = self.total - self.done
        if not self.run_wall or left <= 0:
            return 0.0 if left <= 0 else float("nan")
        return sum(self.run_wall) / len(self.run_wall) * left / max(running, 1)


def run_jobs(jobs: Iterable[RunJob], backend: Backend,
             on_outcome: Callable[[RunOutcome, Progress], None] | None = None) -> list[RunOutcome]:
    """Run ``jobs`` on ``backend``; returns their outcomes in the order of ``jobs``. Jobs whose
    directory holds a finished run are read back here, without a worker."""
    jobs = list(jobs)
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ValueError("run_jobs: two jobs share a name")
    progress = Progress(total=len(jobs))
    outcomes: dict[str, RunOutcome] = {}

    def record(outcome: RunOutcome) -> None:
        outcomes[outcome.name] = outcome
        progress.done += 1
        progress.failed += outcome.status not in FINISHED_STATUSES
        progress.reused += outcome.reused
        if not outcome.reused:
            progress.run_wall.append(outcome.wall)
        if on_outcome is not None:
            on_outcome(outcome, progress)

    todo = []
    for job in jobs:
        done = read_summary(Path(job.out))
        if done.get("status") in FINAL_STATUSES and (Path(job.out) / "scenario.toml").is_file():
            record(run_job(job))  # reads it back
        else:
            todo.append(job)
    for outcome in backend.run(todo):
        record(outcome)
    return [outcomes[name] for name in names]
