"""Measured collective cost per topology level: the ``comm.fitted`` block of a scenario.

``simtrain calibrate --nccl-tests LOG --write FILE`` fits, per nccl-tests sweep, a latency
and a bus bandwidth per size range (``simtrain.ingest.nccl_fit``: t(S) = alpha + S·F(n) /
busbw, F nccl-tests' busbw factor) and writes them as this block. The comm model then
takes a call of the same op on the same level (inside one server: ``intra-node``; across
servers: ``inter-node``) from the measurement instead of NCCL's tuning tables: the
algorithm it would choose still sets which links the flows use (so contention stays
real), but the launch latency is the fitted alpha and the flows are scaled to move the
bytes at the fitted bus bandwidth on an idle network. Sizes below the first fitted range
keep the model (the log did not measure them); above the last, the last range applies.
busbw is nccl-tests' group-size-independent measure, so a group of another size on the
same level uses the same bus bandwidth; the latency is the one measured at ``ranks``. When
several entries match, the one whose ``ranks`` is nearest (in ratio) wins.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from simtrain.units import Bandwidth, Bytes, Seconds

FITTED_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
Level = Literal["intra-node", "inter-node"]


class FittedRange(BaseModel):
    """One size range [from_bytes, to_bytes] with its latency and bus bandwidth."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    from_bytes: Bytes = Field(gt=0)
    to_bytes: Bytes = Field(gt=0)
    latency: Seconds = Field(ge=0)
    busbw: Bandwidth = Field(gt=0)

    def time(self, nbytes: float, factor: float) -> float:
        """alpha + S·F / busbw (s)."""
        return self.latency + nbytes * factor / self.busbw


class FittedLevel(BaseModel):
    """A measured collective on one topology level: op, group size, size ranges."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    op: Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]
    level: Level
    ranks: PositiveInt = Field(ge=2)
    nodes: PositiveInt = 1
    source: str = ""
    ranges: list[FittedRange] = Field(min_length=1)

    @model_validator(mode="after")
    def _ordered(self) -> FittedLevel:
        lows = [r.from_bytes for r in self.ranges]
        if lows != sorted(lows) or any(r.to_bytes < r.from_bytes for r in self.ranges):
            raise ValueError("ranges must be in increasing size order with from_bytes <= "
                             "to_bytes")
        if (self.level == "intra-node") != (self.nodes == 1):
            raise ValueError(f"level {self.level} does not match nodes: {self.nodes}")
        return self

    def range_for(self, nbytes: float) -> FittedRange | None:
        """The range that applies to ``nbytes``: the last whose from_bytes <= nbytes; None
        below the first (not measured)."""
        found = None
        for r in self.ranges:
            if r.from_bytes <= nbytes:
                found = r
        return found


def level_of(nodes: int) -> Level:
    """The level of a group spanning ``nodes`` servers."""
    return "intra-node" if nodes <= 1 else "inter-node"


def lookup(fitted: Sequence[FittedLevel], op: str, ranks: int, nodes: int,
           nbytes: float) -> FittedRange | None:
    """The fitted range for a call, or None when no entry covers it (see module doc)."""
    level = level_of(nodes)
    matches = [f for f in fitted if f.op == op and f.level == level]
    if not matches or ranks < 2:
        return None
    best = min(matches, key=lambda f: abs(math.log(ranks / f.ranks)))
    return best.range_for(nbytes)
