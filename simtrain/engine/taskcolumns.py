"""The task graph's storage: its columns, the interned tables they code into, and the one
primitive that appends many rows at once.

``TaskGraph`` (``taskgraph.py``) checks what strategies hand it and adds tasks; this base
holds what a row is made of. Every column is an ``array`` (one machine value a task),
every string, rank group, communication spec and meta is interned once in a ``_Table``
and coded by its index, and the dependencies are one CSR pair (``dep_start``,
``dep_ids``). ``_extend`` appends a batch of rows with C-level repeats and one flattened
dependency list, so a lowering that emits a whole stage's ranks at once pays the
interpreter per batch, not per task.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence
from itertools import accumulate
from typing import Any

import numpy as np

from simtrain.engine.task import CommSpec


class _Table(list[Any]):
    """Interned values: ``code(v)`` is v's index, appended on first sight."""

    def __init__(self) -> None:
        super().__init__()
        self.lookup: dict[Any, int] = {}

    def code(self, value: Any) -> int:
        code = self.lookup.get(value)
        if code is None:
            code = self.lookup[value] = len(self)
            self.append(value)
        return code


class TaskColumns:
    """The columns and tables of a graph over ``num_ranks`` ranks (no checks: see
    ``TaskGraph``, which adds tasks through these)."""

    def __init__(self, num_ranks: int) -> None:
        self.num_ranks = num_ranks
        self.kinds, self.names, self.stream_names = _Table(), _Table(), _Table()
        self.groups, self.comms, self.metas = _Table(), _Table(), _Table()
        self.kind = array("I")
        self.name = array("I")
        self.stream = array("I")
        self.group = array("I")  # code into ``groups`` (rank tuples)
        self.duration = array("d")
        self.flops = array("d")
        self.nbytes = array("d")
        self.comm = array("i")  # code into ``comms``, -1 for compute
        self.meta = array("I")  # code into ``metas``
        self.dep_start = array("q", [0])  # deps of task i: dep_ids[dep_start[i]:dep_start[i+1]]
        self.dep_ids = array("q")
        self._single: list[int] = []  # rank -> code of the group (rank,), -1 before its first

    def __len__(self) -> int:
        return len(self.kind)

    def codes(self, column: str) -> np.ndarray:
        """A column as a numpy array (a copy)."""
        values: array = getattr(self, column)
        return np.frombuffer(values, dtype=values.typecode).copy() if len(values) else \
            np.zeros(0, dtype=values.typecode)

    def _meta_code(self, meta: Mapping[str, Any] | None) -> int:
        items = tuple(meta.items()) if meta else ()
        try:
            code = self.metas.lookup.get(items)
        except TypeError:  # an unhashable value: kept as its own copy
            self.metas.append(dict(items))
            return len(self.metas) - 1
        if code is None:
            code = self.metas.lookup[items] = len(self.metas)
            self.metas.append(dict(items))
        return code

    def _single_code(self, rank: int) -> int:
        single = self._single
        if rank >= len(single):
            single.extend(-1 for _ in range(rank + 1 - len(single)))
        if single[rank] < 0:
            single[rank] = self.groups.code((rank,))
        return single[rank]

    def _single_codes(self, ranks: Sequence[int]) -> list[int]:
        """The group codes of ``(r,)`` for each of ``ranks`` (checked ranks), interned in
        rank order as ``_single_code`` one by one would."""
        single = self._single
        if len(ranks) and max(ranks) < len(single):
            codes = list(map(single.__getitem__, ranks))
            if -1 not in codes:
                return codes
        return [self._single_code(r) for r in ranks]

    def _spec(self, key: tuple[Any, ...], copies: tuple[tuple[int, ...], ...]) -> int:
        """Intern the CommSpec of ``key`` (op, nbytes, algorithm, splits, id(copies), sms)."""
        comms = self.comms
        code = comms.lookup[key] = len(comms)
        comms.append(CommSpec(op=key[0], nbytes=key[1], algorithm=key[2], splits=key[3],
                              copies=copies, sms=key[5]))
        return code

    def _extend(self, n: int, kind: str, name: str, stream: str, groups: list[int],
                durations: list[float] | float, flops: list[float] | float,
                nbytes: float, comms: list[int] | int, meta: Mapping[str, Any] | None,
                deps: Sequence[Sequence[int]], flat: list[int]) -> int:
        """Append ``n`` checked rows (one ``kind``, ``name``, ``stream``, ``nbytes`` and
        meta; a number where every row shares it, else a list of one value a row; row i
        after ``deps[i]``, ``flat`` their concatenation), the columns as ``n`` appends one
        by one would leave them. Returns the first row's id."""
        first = len(self.kind)
        self.kind.frombytes(array("I", [self.kinds.code(kind)]).tobytes() * n)
        self.name.frombytes(array("I", [self.names.code(name)]).tobytes() * n)
        self.stream.frombytes(array("I", [self.stream_names.code(stream)]).tobytes() * n)
        self.group.fromlist(groups)
        for column, values in ((self.duration, durations), (self.flops, flops)):
            if isinstance(values, list):
                column.fromlist(values)
            else:
                column.frombytes(array("d", [values]).tobytes() * n)
        self.nbytes.frombytes(array("d", [nbytes]).tobytes() * n)
        if isinstance(comms, list):
            self.comm.fromlist(comms)
        else:
            self.comm.frombytes(array("i", [comms]).tobytes() * n)
        self.meta.frombytes(array("I", [self._meta_code(meta)]).tobytes() * n)
        dep_ids, dep_start = self.dep_ids, self.dep_start
        base = len(dep_ids)
        if len(flat) == n and all(deps):  # one dependency each (a chain): no lengths
            dep_start.frombytes(np.arange(base + 1, base + n + 1, dtype=np.int64).tobytes())
        elif n < 256:  # numpy's call costs more than it saves on a few rows
            dep_start.fromlist(list(accumulate(map(len, deps), initial=base))[1:])
        else:
            dep_start.frombytes((np.cumsum(np.fromiter(map(len, deps), dtype=np.int64,
                                                       count=n)) + base).tobytes())
        dep_ids.fromlist(flat)
        assert len(self.kind) == len(self.group) == len(self.duration) == len(self.comm) \
            == first + n == len(dep_start) - 1, "a batch has one value per row"
        return first


def row_values(values: Sequence[float] | float) -> list[float] | float:
    """A per-row sequence as a list (what the columns take), a shared number as is."""
    return values if isinstance(values, list | float | int) else list(values)


def listed(values: list[float] | float, n: int) -> list[float]:
    return values if isinstance(values, list) else [values] * n


def finite_at_least(values: list[float] | float, n: int, low: float) -> bool:
    """Whether ``values`` (a number, or a list of ``n``) are finite and >= ``low``."""
    if isinstance(values, list):
        return len(values) == n and min(values) >= low and all(map(math.isfinite, values))
    return math.isfinite(values) and values >= low
