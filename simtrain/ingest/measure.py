"""From a trace's kernels to measured ops: efficiency-table rows and collective timings.

Kernels launched by the same CPU op instance (same External id) and of the same category
count as one op whose time is the sum of their durations; memory-bound kernels a GEMM op
launches (split-K reductions, epilogues) count as part of that GEMM, as the simulator's
GEMM op stands for the whole matrix product. Ops of one shape, dtype and kind
are averaged into one row whose ``count`` says how many were measured.
"""

from __future__ import annotations

import io
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from simtrain.comm.model import busbw_factor
from simtrain.ingest.classify import (
    GEMM_OPS,
    attention_flops,
    gemm_shape,
    kernel_category,
    nccl_op,
    sim_dtype,
    tensor_bytes,
)
from simtrain.ingest.kineto import CpuOp, Kernel
from simtrain.workload.tables import MEMORY_KINDS, Row, atomic_write

_COMM_DTYPE = {"bfloat16": 2, "half": 2, "float": 4, "float16": 2, "float32": 4,
               "double": 8, "long": 8, "int": 4, "byte": 1, "char": 1}


@dataclass(frozen=True, slots=True)
class Collective:
    """Measured NCCL calls of one op, message size and group size (nccl-tests units)."""

    op: str
    bytes: float
    group_size: int
    time_s: float
    count: int
    algorithm: str

    def busbw(self) -> float:
        """nccl-tests bus bandwidth (bytes/s): size / time · busbw factor."""
        return self.bytes / self.time_s * busbw_factor(self.op, self.group_size)


@dataclass
class Measured:
    """What the importer learned from one step (or all steps) of a trace."""

    rows: list[Row]
    collectives: list[Collective]
    time_by_category: dict[str, float]
    count_by_category: dict[str, int]
    missing_shapes: dict[str, int]
    unknown: dict[str, float] = field(default_factory=dict)  # kernel name -> seconds
    op_instances: list[tuple[str, tuple[float, ...], float, str]] = field(default_factory=list)


def _comm_size(op: str, cpu: CpuOp) -> tuple[float, int] | None:
    """(message bytes in nccl-tests' convention, group size) from record_param_comms."""
    if cpu.comm is None:
        return None
    in_n, out_n, group, dtype = cpu.comm
    elem = _COMM_DTYPE.get(str(dtype).lower().removeprefix("c10::"))
    if not isinstance(group, int) or elem is None:
        return None
    nelems = out_n if op == "all_gather" else in_n
    if not isinstance(nelems, int) or nelems <= 0:
        return None
    return float(nelems * elem), group


def _size(category: str, kernel: Kernel, cpu: CpuOp) -> tuple[float, ...] | None:
    if category == "gemm":
        shape = gemm_shape(cpu.name, cpu.dims)
        return tuple(float(v) for v in shape) if shape else None
    if category == "attention":
        backward = "bwd" in kernel.name.lower() or "backward" in cpu.name
        flops = attention_flops(cpu.name, cpu.dims, backward)
        return (flops,) if flops else None
    nbytes = tensor_bytes(cpu.dims, cpu.types)
    return (nbytes,) if nbytes else None


def measure(kernels: Sequence[Kernel], ops: dict[int, CpuOp], gpu: str,
            default_dtype: str = "bf16") -> Measured:
    """Classify ``kernels``, sum them per CPU op instance, average per shape."""
    time_by: dict[str, float] = defaultdict(float)
    count_by: dict[str, int] = defaultdict(int)
    missing: dict[str, int] = defaultdict(int)
    unknown: dict[str, float] = defaultdict(float)
    # (category, ext id) -> [time, first kernel, cpu op]
    instances: dict[tuple[str, int], list[Any]] = {}
    comm: dict[tuple[str, float, int, str], list[Any]] = {}  # -> [seconds, count]
    for k in kernels:
        cpu = ops.get(k.ext) if k.ext is not None else None
        cat = kernel_category(k.name, cpu.name if cpu else "")
        if cat in MEMORY_KINDS and cpu is not None and cpu.name in GEMM_OPS:
            cat = "gemm"  # a split-K reduction or epilogue kernel is part of its GEMM
        time_by[cat] += k.dur
        count_by[cat] += 1
        if cat == "unknown":
            unknown[k.name] += k.dur
            continue
        if cat == "memcpy":
            continue
        if cat == "nccl":
            op, algo = nccl_op(k.name)
            message = _comm_size(op, cpu) if cpu else None
            if message is None:
                missing[cat] += 1
                continue
            calls = comm.setdefault((op, message[0], message[1], algo), [0.0, 0])
            calls[0] += k.dur
            calls[1] += 1
            continue
        if cpu is None or k.ext is None:
            missing[cat] += 1
            continue
        inst = instances.setdefault((cat, k.ext), [0.0, k, cpu])
        inst[0] += k.dur
    groups: dict[tuple[str, tuple[float, ...], str], list[Any]] = {}
    op_instances: list[tuple[str, tuple[float, ...], float, str]] = []
    for (cat, _ext), (t, k, cpu) in instances.items():
        size = _size(cat, k, cpu)
        if size is None:
            missing[cat] += 1
            continue
        dtype = sim_dtype(cpu.types) or default_dtype
        op_instances.append((cat, size, t, k.name))
        acc = groups.setdefault((cat, size, dtype), [0.0, 0, Counter()])
        acc[0] += t
        acc[1] += 1
        acc[2][k.name] += 1
    rows = [Row(cat, size, dtype, gpu, t / n, None, n, names.most_common(1)[0][0][:120])
            for (cat, size, dtype), (t, n, names) in sorted(groups.items())
            if cat == "gemm" or cat == "attention" or cat in MEMORY_KINDS]
    collectives = [Collective(op, b, g, t / n, n, algo)
                   for (op, b, g, algo), (t, n) in sorted(comm.items())]
    return Measured(rows, collectives, dict(time_by), dict(count_by), dict(missing),
                    dict(unknown), op_instances)


def write_collectives(path: Path, rows: Sequence[Collective], source: str = "") -> None:
    """Write the measured collective table atomically as YAML: op, bytes (nccl-tests
    "size"), group_size, time_s, algbw and busbw (GB/s, 1e9 B/s, as nccl-tests prints
    them), count, algorithm."""
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
