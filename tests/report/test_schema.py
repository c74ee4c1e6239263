"""One home for the summary's metrics: every key simulate writes is declared, once."""

from __future__ import annotations

from pathlib import Path

import pytest

import simtrain
from simtrain.cli import _summary_table
from simtrain.report.compare import COMPARE_METRICS, differences
from simtrain.report.html import cards_html
from simtrain.report.schema import (
    BUBBLE_LABEL,
    BY_KEY,
    DETAIL_KEYS,
    IDLE_LABEL,
    METRICS,
    idle_label,
    shown_in,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def summary() -> dict:
    return simtrain.simulate(ROOT / "scenarios/quickstart.yaml").summary


def test_every_summary_key_is_declared_and_every_metric_is_produced(summary):
    assert set(summary) <= set(BY_KEY) | set(DETAIL_KEYS), set(summary) - set(BY_KEY)
    # No metric that nothing produces (optional ones only on some runs, e.g. with tables).
    assert {m.key for m in METRICS if not m.optional} <= set(summary)
    assert len(BY_KEY) == len(METRICS) and not set(BY_KEY) & set(DETAIL_KEYS)


def test_surfaces_read_the_schema(summary):
    rows = [str(c) for c in _summary_table(summary).columns[0]._cells]
    assert rows == [m.label if "bubble" not in m.key else IDLE_LABEL for m in shown_in("cli")
                    if not m.optional]
    with_tables = {**summary, "measured_compute": {"measured_fraction": 0.8}}
    assert "compute from measured tables" in [
        str(c) for c in _summary_table(with_tables).columns[0]._cells]
    cards = cards_html(summary)
    assert all(f">{m.label}<" in cards for m in shown_in("card")
               if "bubble" not in m.key and not m.optional)
    assert list(differences([summary, summary])) == [m.key for m in COMPARE_METRICS
                                                     if not m.optional]
    # An optional metric is shown where the run has it: jittered steps (sim.variability).
    jittered = {**summary, "variability": {"p50_step_s": 1.0, "p99_step_s": 1.2,
                                           "tail_from_sync": 0.5}}
    assert ">p99 step (jittered)<" in cards_html(jittered)
    assert "p99 step (jittered)" in [str(c) for c in _summary_table(jittered).columns[0]._cells]
    assert "variability.p99_step_s" in differences([jittered, jittered])


def test_idle_time_is_named_by_its_cause():
    pp = {"parallelism": {"pp": 4}}
    dp = {"parallelism": {"pp": 1}}
    assert idle_label([pp]) == BUBBLE_LABEL and idle_label([dp]) == IDLE_LABEL
    assert idle_label([pp, dp]) == f"{BUBBLE_LABEL} / idle"


def test_formats_by_unit():
    assert BY_KEY["tokens_per_s"].fmt(97_523.0) == "97.52 k/s"
    assert BY_KEY["mfu"].fmt(0.349) == "34.9%"
    assert BY_KEY["parameters"].fmt(2_651_922_432) == "2.652 B"
    assert BY_KEY["num_gpus"].fmt(16384) == "16,384"
