"""Parse the stdout of nccl-tests (all_reduce_perf, all_gather_perf, reduce_scatter_perf,
alltoall_perf) into a sweep: sizes with out-of-place and in-place times and bandwidths.

The table nccl-tests prints (NVIDIA/nccl-tests, src/common.cu) is announced by a header
line naming its columns, e.g.::

    #  size  count  type  redop  root  time  algbw  busbw #wrong  time  algbw  busbw #wrong

(older releases have no ``root`` column and say ``error`` for ``#wrong``); the first
``time algbw busbw`` triple is out-of-place, the second in-place. The collective comes
from ``# Collective test starting: NAME`` or, failing that, the file name; the group size
from the ``#  Rank N Group ... on HOST device`` lines (their hosts give the node count),
or from busbw / algbw when those lines are missing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from simtrain.ingest import IngestError

OPS = {"all_reduce": "all_reduce", "allreduce": "all_reduce", "all_gather": "all_gather",
       "allgather": "all_gather", "reduce_scatter": "reduce_scatter",
       "reducescatter": "reduce_scatter", "alltoall": "all_to_all", "all_to_all": "all_to_all"}
_HEADER_HINT = ("expected an nccl-tests results header such as '#  size  count  type  redop  "
                "root  time  algbw  busbw #wrong  time  algbw  busbw #wrong'")
_START = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_RANK = re.compile(r"#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device")


@dataclass(frozen=True)
class Sweep:
    """One nccl-tests run: message sizes (bytes) and, per size, out-of-place and in-place
    times (s) and bus bandwidths (bytes/s)."""

    path: str
    op: str
    nranks: int
    nodes: int
    sizes: tuple[float, ...]
    time_oop: tuple[float, ...]
    time_ip: tuple[float, ...]
    busbw_oop: tuple[float, ...]
    busbw_ip: tuple[float, ...]


def _op_of(path: Path, text: str) -> str:
    names = [m.group(1) for m in _START.finditer(text)] + [path.name]
    for name in names:
        low = name.lower().replace("-", "_")
        for key in sorted(OPS, key=len, reverse=True):
            if key in low:
                return OPS[key]
    raise IngestError(path, "cannot tell the collective: expected a '# Collective test "
                      "starting: all_reduce_perf' line or all_reduce/all_gather/"
                      "reduce_scatter/alltoall in the file name")


def _columns(path: Path, tokens: list[str]) -> tuple[int, int, int, int]:
    """Indices of (time, busbw) out-of-place and in-place in a data row."""
    times = [i for i, t in enumerate(tokens) if t == "time"]
    busbw = [i for i, t in enumerate(tokens) if t == "busbw"]
    if tokens[:2] != ["size", "count"] or len(times) != 2 or len(busbw) != 2:
        raise IngestError(path, f"unexpected nccl-tests header {' '.join(tokens)!r}; "
                          f"{_HEADER_HINT}")
    return times[0], busbw[0], times[1], busbw[1]


def _nranks_from_ratio(op: str, algbw: float, busbw: float) -> int | None:
    """Invert nccl-tests' busbw factor: 2(n-1)/n (all-reduce) or (n-1)/n (the others)."""
    if algbw <= 0 or busbw <= 0:
        return None
    r = busbw / algbw / (2.0 if op == "all_reduce" else 1.0)
    return round(1.0 / (1.0 - r)) if r < 1.0 else None


def parse_log(path: Path) -> Sweep:
    """The sweep in an nccl-tests stdout log; IngestError (one line) if it is not one."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise IngestError(path, f"cannot read: {exc.strerror}") from None
    cols: tuple[int, int, int, int] | None = None
    width = 0
    rows: list[tuple[float, float, float, float, float]] = []
    hosts: dict[int, str] = {}
    ratio: tuple[float, float] | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            tokens = line.lstrip("#").split()
            if (m := _RANK.match(line)) is not None:
                hosts[int(m.group(1))] = m.group(2)
            elif tokens[:2] == ["size", "count"] or ("size" in tokens and "time" in tokens):
                cols = _columns(path, tokens)
                width = len(tokens)
            continue
        tokens = line.split()
        if cols is None or not tokens or not tokens[0].isdigit():
            continue
        if len(tokens) < width - 1:  # "#wrong" may be blank in some builds
            raise IngestError(path, f"row {line.strip()!r} has {len(tokens)} columns, the "
                              f"header {width}")
        t_o, b_o, t_i, b_i = cols
        try:
            rows.append((float(tokens[0]), float(tokens[t_o]) * 1e-6,
                         float(tokens[t_i]) * 1e-6, float(tokens[b_o]) * 1e9,
                         float(tokens[b_i]) * 1e9))
            ratio = (float(tokens[t_o + 1]), float(tokens[b_o])) if float(
                tokens[b_o]) > 0 else ratio
        except ValueError:
            raise IngestError(path, f"row {line.strip()!r}: expected numbers in the time "
                              "and busbw columns") from None
    if cols is None:
        raise IngestError(path, f"no nccl-tests results table; {_HEADER_HINT}")
    if not rows:
        raise IngestError(path, "the results table has no rows")
    op = _op_of(path, text)
    nranks = len(hosts) or (_nranks_from_ratio(op, *ratio) if ratio else None)
    if not nranks:
        raise IngestError(path, "cannot tell the group size: no '#  Rank N Group ...' lines "
                          "and no non-zero bandwidths")
    rows.sort()
    return Sweep(str(path), op, nranks, len(set(hosts.values())) or 1,
                 *(tuple(r[i] for r in rows) for i in range(5)))
