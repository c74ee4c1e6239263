"""A point never crashes the sweep: rejected or hung points are invalid, surprises failed."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from simtrain.study.worker import run_batch

BASE = {"name": "q", "cluster": {"preset": "dgx-a100"}, "model": {"preset": "gpt2-small",
                                                                  "num_layers": 2},
        "training": {"global_batch_size": 64, "micro_batch_size": 8}}


def test_statuses_and_reasons() -> None:
    records = run_batch(BASE, "base.yaml", [
        (0, "a", {}, []),
        (1, "b", {"sim.hangs": {3: "2ms"}}, ['sim.hangs={"3": "2ms"}']),
        (2, "c", {"training.micro_batch_size": 7}, ["training.micro_batch_size=7"]),
    ])
    assert [r["id"] for r in records] == ["a", "b", "c"]
    assert [r["status"] for r in records] == ["ok", "invalid", "invalid"]
    assert records[0]["summary"]["num_gpus"] == 8 and records[0]["error"] is None
    assert records[1]["error"].startswith("deadlock: simulation deadlocked")
    assert "for rank 3" in records[1]["error"]
    # the base travels as a dict; errors still name the base file, not "<dict>"
    assert records[2]["error"].startswith("base.yaml: training.global_batch_size:")
    assert all(r["elapsed_s"] >= 0 for r in records)


def test_an_unexpected_exception_is_a_failed_point(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_: Any) -> Any:
        raise KeyError("lm_head")

    monkeypatch.setattr(sys.modules["simtrain.simulate"], "simulate", boom)
    (record,) = run_batch(BASE, "base.yaml", [(0, "a", {}, [])])
    assert (record["status"], record["error"]) == ("failed", "KeyError: 'lm_head'")
