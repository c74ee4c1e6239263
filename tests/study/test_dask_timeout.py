"""A Dask sweep whose last worker dies fails with a clear message instead of blocking."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("distributed")

from simtrain.study.executors import DaskExecutor  # noqa: E402


def _slow(x: int) -> int:
    time.sleep(0.2)
    return x


def test_pending_points_without_workers_time_out() -> None:
    ex = DaskExecutor(None, workers=1, processes=False, no_worker_timeout=0.5, poll_s=0.1)
    try:
        results = ex.imap_unordered(_slow, [(i,) for i in range(20)])
        assert next(results) in range(20)  # the worker runs points ...
        worker = next(iter(ex._cluster.workers.values()))
        ex._cluster.sync(worker.close, timeout=5, reason="test: the last worker dies")
        began = time.monotonic()
        with pytest.raises(RuntimeError, match=r"no workers for 0.5 s and \d+ batches"):
            list(results)  # ... then none is left: an error after ~0.5 s, not a hang
        assert time.monotonic() - began < 10
    finally:
        ex.close()
