"""Chrome trace / Perfetto export of a timeline, following PyTorch profiler conventions.

JSON object format ``{"traceEvents": [...], "displayTimeUnit": "ms"}``: one process per GPU
(``process_name`` "node0/gpu3"), one thread per stream (``thread_name``), complete ("X")
events with ``ts``/``dur`` in microseconds. Communication spans get NCCL-like kernel names
(``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``) and the args the PyTorch profiler records
for NCCL kernels ("Collective name", "In msg nelems", "Group size", "Process Group Ranks",
...). Each point-to-point send is joined to its recv by a flow arrow ("s"/"f", ``bp: "e"``).
Output is deterministic: the same timeline gives the same bytes (gzip without a timestamp).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from simtrain.comm.ops import REDUCING, CollectiveOp
from simtrain.engine.taskgraph import TaskGraph
from simtrain.engine.timeline import Span, Timeline
from simtrain.report.rows import ServerOf, all_ranks, rank_labels, stream_sort_key

# NCCL's kernel naming: ncclDevKernel_<Func>_<RedOp>_<dtype>_<ALGO>_<PROTO> (src/device).
NCCL_FUNCS: dict[str, tuple[str, str]] = {
    CollectiveOp.ALL_REDUCE: ("AllReduce", "allreduce"),
    CollectiveOp.REDUCE_SCATTER: ("ReduceScatter", "_reduce_scatter_base"),
    CollectiveOp.ALL_GATHER: ("AllGather", "_allgather_base"),
    CollectiveOp.BROADCAST: ("Broadcast", "broadcast"),
    CollectiveOp.REDUCE: ("Reduce", "reduce"),
    CollectiveOp.ALL_TO_ALL: ("SendRecv", "all_to_all"),
    CollectiveOp.ALL_TO_ALL_V: ("SendRecv", "all_to_all"),
    CollectiveOp.SEND_RECV: ("SendRecv", "send"),
}
_DTYPE_BYTES = {"fp32": 4, "float": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}
# PyTorch's names (the profiler's "dtype" arg) and NCCL's (in kernel names, src/device).
_DTYPE_NAMES = {"fp32": "Float", "float": "Float", "fp16": "Half", "bf16": "BFloat16",
                "fp8": "Float8_e4m3fn", "int8": "Char"}
_NCCL_DTYPES = {"fp32": "f32", "float": "f32", "fp16": "f16", "bf16": "bf16", "fp8": "f8e4m3",
                "int8": "i8"}
_ALGOS = {"ring": "RING", "tree": "TREE", "direct": "RING", "chain": "RING",
          "halving_doubling": "RING", "hierarchical": "RING"}


def nccl_kernel_name(op: str, algorithm: str = "ring", dtype: str = "bf16",
                     nbytes: float = 0.0, protocol: str | None = None) -> str:
    """NCCL-like kernel name of a collective, e.g. ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``.

    The protocol follows NCCL's usual choice by size: LL below 64 KiB, LL128 below 8 MiB,
    SIMPLE above, unless the simulation chose one (``protocol``: LL, LL128 or Simple).
    Point-to-point and all-to-all run NCCL's ``SendRecv`` kernel.
    """
    func = NCCL_FUNCS.get(op, (op.title().replace("_", ""), op))[0]
    if func == "SendRecv":
        return "ncclDevKernel_SendRecv"
    if protocol:
        proto = str(protocol).upper()
    else:
        proto = "LL" if nbytes < 64 * 1024 else "LL128" if nbytes < 8 * 2**20 else "SIMPLE"
    algo = _ALGOS.get(algorithm.split("_")[0] if algorithm not in _ALGOS else algorithm, "RING")
    redop = "Sum_" if op in REDUCING else ""
    return f"ncclDevKernel_{func}_{redop}{_NCCL_DTYPES.get(dtype, dtype)}_{algo}_{proto}"


def span_dtype(span: Span, dtype: str, grad_dtype: str | None = None) -> str:
    """The element type a communication span moves: its own ``dtype`` meta when the
    lowering set one; else ``grad_dtype`` for data-parallel gradient reductions (DDP
    buckets and ZeRO/FSDP reduce-scatters are kept in ``parallelism.ddp.grad_dtype``, fp32
    by default); else the training ``dtype`` (activations, parameter all-gathers)."""
    own = span.meta.get("dtype")
    if own:
        return str(own)
    if grad_dtype and span.kind == "dp_comm" and span.meta.get("op") in REDUCING:
        return grad_dtype
    return dtype


def _comm_args(span: Span, group: tuple[int, ...] | None, dtype: str) -> dict[str, Any]:
    op = str(span.meta.get("op", "comm"))
    size = _DTYPE_BYTES.get(dtype, 2)
    nelems = int(span.bytes // size)
    args: dict[str, Any] = {
        "Collective name": NCCL_FUNCS.get(op, (op, op))[1],
        "In msg nelems": nelems,
        "Out msg nelems": nelems,
        "Input size": int(span.bytes),
        "dtype": _DTYPE_NAMES.get(dtype, dtype),
        "Group size": int(span.meta.get("group_size", len(group) if group else 0)),
        "algorithm": str(span.meta.get("algorithm", "")),
        "protocol": str(span.meta.get("protocol", "")),
        "name": span.name,
    }
    if group is not None:
        args["Process Group Ranks"] = "[" + ", ".join(str(r) for r in group) + "]"
    for key, value in span.meta.items():
        if key not in ("op", "algorithm", "group_size", "protocol") and key not in args:
            args[key] = value if isinstance(value, int | float | str | bool) else str(value)
    return args


def chrome_trace(
    timeline: Timeline,
    *,
    graph: TaskGraph | None = None,
    server_of: ServerOf | None = None,
    dtype: str = "bf16",
    grad_dtype: str | None = None,
) -> dict[str, Any]:
    """The trace as a JSON-ready dict (see module docstring). ``dtype`` is the training
    dtype, ``grad_dtype`` that of gradient reductions (None: the same); see span_dtype."""
    labels = rank_labels(all_ranks(timeline), server_of)
    streams: dict[int, set[str]] = {}
    for s in timeline.spans:
        streams.setdefault(s.rank, set()).add(s.stream)
    tids: dict[tuple[int, str], int] = {}
    events: list[dict[str, Any]] = []
    for rank in sorted(streams):
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0,
                       "args": {"name": labels.get(rank, f"rank{rank}")}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0,
                       "args": {"sort_index": rank}})
        for i, stream in enumerate(sorted(streams[rank], key=stream_sort_key)):
            tid = i + 1
            tids[(rank, stream)] = tid
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid,
                           "args": {"name": f"stream {stream}"}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid,
                           "args": {"sort_index": tid}})
    # The columnar graph's accessors, not its Task view (which builds an object per access).
    ranks_of = graph.ranks if graph is not None else None
    count = len(graph) if graph is not None else 0
    p2p: dict[int, dict[int, Span]] = {}
    for s in sorted(timeline.spans, key=lambda s: (s.start, s.rank, s.stream, s.end)):
        group = None
        if ranks_of is not None and 0 <= s.task < count:
            group = ranks_of(s.task)
        ts, dur = s.start * 1e6, s.duration * 1e6
        if s.is_comm or "op" in s.meta:
            op = str(s.meta.get("op", "comm"))
            dt = span_dtype(s, dtype, grad_dtype)
            name = nccl_kernel_name(op, str(s.meta.get("algorithm", "ring")), dt, s.bytes,
                                    s.meta.get("protocol"))
            args = _comm_args(s, group, dt)
            cat = "kernel"
            if op == CollectiveOp.SEND_RECV:
                p2p.setdefault(s.task, {})[s.rank] = s
        else:
            name, cat = s.name, "kernel"
            args = {"kind": s.kind}
            if s.flops:
                args["flops"] = s.flops
            if s.bytes:
                args["bytes"] = s.bytes
            for key, value in s.meta.items():
                args[key] = value if isinstance(value, int | float | str | bool) else str(value)
        events.append({"ph": "X", "cat": cat, "name": name, "pid": s.rank,
                       "tid": tids[(s.rank, s.stream)], "ts": ts, "dur": dur, "args": args})
    flow_id = 0
    for task_id in sorted(p2p):
        ends = p2p[task_id]
        if ranks_of is not None and 0 <= task_id < count and len(ranks_of(task_id)) == 2:
            src, dst = ranks_of(task_id)
        elif len(ends) == 2:
            src, dst = sorted(ends)
        else:
            continue
        if src not in ends or dst not in ends:
            continue
        send, recv = ends[src], ends[dst]
        flow_id += 1
        common = {"cat": "p2p", "name": f"send {send.name}", "id": flow_id}
        events.append({**common, "ph": "s", "pid": src, "tid": tids[(src, send.stream)],
                       "ts": send.start * 1e6})
        events.append({**common, "ph": "f", "bp": "e", "pid": dst,
                       "tid": tids[(dst, recv.stream)], "ts": recv.start * 1e6})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(path: Path | str, trace: dict[str, Any]) -> Path:
    """Write ``trace`` as JSON, gzip-compressed when the name ends in ``.gz``."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(trace, separators=(",", ":")).encode("utf-8")
    if out.suffix == ".gz":
        with out.open("wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0,
                                                  filename="") as gz:
            gz.write(data)
    else:
        out.write_bytes(data)
    return out
