"""The measured collective table: NCCL calls of a trace, in nccl-tests' units."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from ruamel.yaml import YAML

from simtrain.ingest.measure import Collective
from simtrain.workload.tables import atomic_write


def write_collectives(path: Path, rows: Sequence[Collective], source: str = "") -> None:
    """Write ``rows`` as YAML atomically: op, bytes (nccl-tests "size"), group_size,
    time_s, algbw and busbw (GB/s, 1e9 B/s, as nccl-tests prints them), count, algorithm."""
    records = [{"op": c.op, "bytes": c.bytes, "group_size": c.group_size,
                "time_s": c.time_s, "algbw_gbps": round(c.bytes / c.time_s / 1e9, 4),
                "busbw_gbps": round(c.busbw() / 1e9, 4), "count": c.count,
                "algorithm": c.algorithm} for c in rows]
    buf = io.StringIO()
    yaml = YAML(typ="safe")
    yaml.default_flow_style = None
    yaml.width = 4096
    yaml.dump({"source": source, "rows": records}, buf)
    atomic_write(path, buf.getvalue())
