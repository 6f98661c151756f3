"""Where local training runs (DESIGN.md §2 principle 2).

An executor turns a :class:`~asyncfl.training.LocalJob` into an asyncio future of the local
model. The simulator submits a job at dispatch and awaits its future only when the buffer
flushes, so compute overlaps with event processing. Jobs carry their own seeds: the results do
not depend on the executor.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
from typing import Protocol

import torch

from asyncfl.scenario import ClientConfig, RunConfig
from asyncfl.tasks.base import Task
from asyncfl.training import LocalJob, local_train


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


class ThreadExecutor:
    """Trains in a thread pool as soon as the job is dispatched (torch releases the GIL)."""

    def __init__(self, task: Task, client: ClientConfig, workers: int) -> None:
        self.task, self.client = task, client
        self.pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="asyncfl-train")

    def submit(self, job: LocalJob) -> "asyncio.Future[torch.Tensor]":
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self.pool, local_train, self.task, self.client, job)

    async def aclose(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


EXECUTORS = {
    "inline": lambda task, client, run: InlineExecutor(task, client),
    "threads": lambda task, client, run: ThreadExecutor(task, client, run.workers),
}


def make_executor(task: Task, client: ClientConfig, run: RunConfig) -> Executor:
    factory = EXECUTORS.get(run.executor)
    if factory is None:
        from asyncfl.errors import ScenarioError

        raise ScenarioError([f"run.executor = {run.executor!r}: not available in this build. Allowed: {', '.join(EXECUTORS)}"])
    return factory(task, client, run)
