"""Link utilisation from flows: rates charged to every link of a route, binned exactly."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from simtrain.engine.timeline import FlowRecord, Timeline
from simtrain.report.figures import link_utilisation_figure
from simtrain.report.links import busiest_links, link_label


@dataclass(frozen=True)
class L:
    src: str
    dst: str
    kind: str
    bandwidth: float


LINKS = [L("g0", "sw", "nvlink", 100.0), L("sw", "g1", "nvlink", 100.0), L("g1", "sw", "ib", 50.0)]


def _timeline() -> Timeline:
    tl = Timeline(num_ranks=2)
    # 100 B over links 0 and 1 in [0, 2): 50 B/s = 50% of 100 B/s.
    tl.flows.append(FlowRecord(0.0, 2.0, 100.0, (0, 1)))
    # 100 B over link 1 in [1, 2): 100 B/s more on link 1 -> 150% there in [1, 2).
    tl.flows.append(FlowRecord(1.0, 2.0, 100.0, (1,)))
    # 25 B over link 2 in [3, 4): 25 B/s of 50 = 50%.
    tl.flows.append(FlowRecord(3.0, 4.0, 25.0, (2,)))
    return tl


def test_busiest_links_and_binned_utilisation() -> None:
    # Mean load (bytes / bandwidth): link 1 = 2.0 s, link 0 = 1.0 s, link 2 (ib) = 0.5 s.
    edges, loads = busiest_links(_timeline(), LINKS, top=3, bins=4, horizon=4.0)
    assert list(edges) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert [ld.link for ld in loads] == [1, 0, 2]
    assert loads[0].nbytes == 200.0
    assert list(loads[0].utilisation) == pytest.approx([0.5, 1.5, 0.0, 0.0])
    assert list(loads[1].utilisation) == pytest.approx([0.5, 0.5, 0.0, 0.0])
    assert list(loads[2].utilisation) == pytest.approx([0.0, 0.0, 0.0, 0.5])


def test_each_link_kind_keeps_its_busiest_in_view() -> None:
    # With room for two, the ib link displaces the second nvlink link.
    _, loads = busiest_links(_timeline(), LINKS, top=2, bins=4, horizon=4.0)
    assert [ld.link for ld in loads] == [1, 2]
    assert loads[0].label == "sw→g1 (nvlink, 0.0 GB/s)"


def test_partial_bins_integrate_exactly() -> None:
    tl = Timeline(num_ranks=1)
    tl.flows.append(FlowRecord(0.5, 1.5, 100.0, (0,)))  # 100 B/s = 100%
    _, loads = busiest_links(tl, LINKS, bins=2, horizon=2.0)
    assert list(loads[0].utilisation) == pytest.approx([0.5, 0.5])
    total = np.sum(loads[0].utilisation) * 1.0 * 100.0
    assert total == pytest.approx(100.0)


def test_labels_without_names() -> None:
    assert link_label(object(), 7) == "link 7"


def test_figure_has_one_line_per_link() -> None:
    fig = link_utilisation_figure(_timeline(), LINKS, top=3)
    assert fig is not None and len(fig.data) == 3
    # One panel per link, each on its own 0-100% axis, all on one time axis.
    assert {tr.yaxis for tr in fig.data} == {"y", "y2", "y3"}
    assert {tr.xaxis for tr in fig.data} == {"x", "x2", "x3"}
    assert fig.layout.xaxis2.matches == "x3" or fig.layout.xaxis.matches == "x3"
    assert all(fig.layout[f"yaxis{i}"].range == (0, 105) for i in ("", "2", "3"))
    assert len(fig.layout.annotations) == 3 and "peak" in fig.layout.annotations[0].text
    assert link_utilisation_figure(Timeline(num_ranks=1), LINKS) is None
