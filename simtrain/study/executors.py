"""Where sweep batches run: in this process, in local worker processes, or on Dask.

An executor has one job: ``imap_unordered(fn, argument tuples)`` calls ``fn(*args)`` for
each tuple somewhere and yields the results as they complete, in any order. The sweep
runner batches points so per-task overhead stays small, and sorts rows afterwards, so the
table never depends on the executor.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Protocol

EXECUTORS = ("local", "dask", "serial")


class Executor(Protocol):
    """Runs functions on argument tuples; ``workers`` is its parallelism (for batching)."""

    name: str
    workers: int

    def imap_unordered(self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]]
                       ) -> Iterator[Any]:
        """Yield ``fn(*a)`` for each ``a`` in ``args`` as each completes (any order)."""
        ...

    def close(self) -> None:
        """Release workers; pending work is cancelled."""
        ...


class SerialExecutor:
    """Runs everything in this process, in order: for debugging and profiling."""

    name = "serial"
    workers = 1

    def imap_unordered(self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]]
                       ) -> Iterator[Any]:
        for a in args:
            yield fn(*a)

    def close(self) -> None:
        pass


class LocalExecutor:
    """A pool of local worker processes (default: one per CPU core).

    Workers start from a forkserver that has already imported simtrain, so starting one is
    cheap and no thread of the parent (e.g. a progress bar) is forked.
    """

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["simtrain.study.worker", "simtrain.simulate"])
        self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx)

    def imap_unordered(self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]]
                       ) -> Iterator[Any]:
        pending: set[Future[Any]] = {self._pool.submit(fn, *a) for a in args}
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield future.result()
        finally:
            for future in pending:
                future.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class DaskExecutor:
    """Dask distributed: the scheduler at ``address``, or a new local cluster when None.

    Needs the ``dask`` extra (``pip install 'simtrain[dask]'``); the workers need simtrain
    installed too. A local cluster has ``workers`` single-threaded processes (default: one
    per core); ``processes=False`` runs them as threads of this process (tests). When the
    scheduler has had no worker for ``no_worker_timeout`` seconds while points are pending
    (the last worker died), ``imap_unordered`` raises RuntimeError instead of waiting
    forever: Dask itself would hold the tasks until a worker joins.
    """

    name = "dask"

    def __init__(self, address: str | None = None, workers: int | None = None, *,
                 processes: bool = True, no_worker_timeout: float = 60.0,
                 poll_s: float = 1.0) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise RuntimeError("the dask executor needs Dask distributed: "
                               "pip install 'simtrain[dask]'") from None
        self._cluster: Any = None
        if address is None:
            n = workers or os.cpu_count() or 1
            self._cluster = LocalCluster(n_workers=n, threads_per_worker=1,
                                         processes=processes, dashboard_address=":0")
            self._client = Client(self._cluster)
        else:
            self._client = Client(address)
        info = self._client.scheduler_info()
        threads = sum(w.get("nthreads", 1) for w in info.get("workers", {}).values())
        self.workers = max(threads, 1)
        self.no_worker_timeout = no_worker_timeout
        self.poll_s = poll_s

    def imap_unordered(self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]]
                       ) -> Iterator[Any]:
        from distributed import wait as dask_wait

        pending = {self._client.submit(fn, *a, pure=False) for a in args}
        alone_since: float | None = None  # when the scheduler was last seen without workers
        try:
            while pending:
                try:
                    done, pending = dask_wait(pending, timeout=self.poll_s,
                                              return_when="FIRST_COMPLETED")
                except TimeoutError:  # distributed raises on timeout instead of returning
                    done = set()
                for future in done:
                    yield future.result()
                if done or not pending:
                    alone_since = None
                    continue
                if self._client.scheduler_info().get("workers"):
                    alone_since = None
                    continue
                now = time.monotonic()
                alone_since = now if alone_since is None else alone_since
                if now - alone_since >= self.no_worker_timeout:
                    raise RuntimeError(
                        f"the Dask scheduler has had no workers for "
                        f"{self.no_worker_timeout:g} s and {len(pending)} batches are still "
                        "pending (did the last worker die?); start workers and rerun the "
                        "sweep (finished points are kept), or use --executor local")
        finally:
            self._client.cancel([f for f in pending if not f.done()])

    def close(self) -> None:
        self._client.close()
        if self._cluster is not None:
            self._cluster.close()


def make_executor(name: str, *, workers: int | None = None, scheduler: str | None = None
                  ) -> Executor:
    """The executor called ``name`` (one of EXECUTORS); raise ValueError otherwise."""
    if scheduler is not None and name != "dask":
        raise ValueError("--scheduler needs --executor dask")
    if name == "local":
        return LocalExecutor(workers)
    if name == "dask":
        return DaskExecutor(scheduler, workers)
    if name == "serial":
        return SerialExecutor()
    raise ValueError(f"unknown executor {name!r}; expected one of: {', '.join(EXECUTORS)}")


def batch_size(points: int, workers: int, *, per_worker: int = 4, cap: int = 16) -> int:
    """Points per task: about ``per_worker`` tasks per worker, at most ``cap`` points each.

    Several tasks per worker keep workers busy when point costs differ; the cap keeps
    progress and crash loss fine-grained (a killed sweep redoes at most the batches in
    flight).
    """
    if points <= 0:
        return 1
    return max(1, min(cap, math.ceil(points / (max(workers, 1) * per_worker))))
