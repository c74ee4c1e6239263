"""Traces and logs with known numbers: fixtures for tests, benchmarks and demos.

``write_kineto_trace`` writes what ``torch.profiler`` exports for a CUDA run (the event
categories and argument names of Kineto's Chrome trace: ``cpu_op`` with ``Input Dims``
and ``Input type``, ``cuda_runtime`` launches, ``kernel`` events with ``correlation`` and
``External id``, ``ProfilerStep#N`` annotations, ``record_param_comms`` for NCCL) from a
list of ops whose kernel durations the caller chooses. ``write_nccl_tests_log`` writes
the stdout table of nccl-tests (``all_reduce_perf`` and friends, NVIDIA/nccl-tests
src/common.cu) for given sizes and times.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from simtrain.comm.model import busbw_factor


@dataclass(frozen=True)
class SynthOp:
    """One CPU op and the kernels it launches: (kernel name, duration in us) each."""

    cpu_name: str
    dims: Sequence[Sequence[int]]
    types: Sequence[str]
    kernels: Sequence[tuple[str, float]]
    comm: dict[str, Any] | None = None  # record_param_comms args
    stream: int = 7
    linked: bool = True  # False: the kernel carries no External id (no shapes)
    extra: dict[str, Any] = field(default_factory=dict)


def _event(out: IO[str], ev: dict[str, Any], first: list[bool]) -> None:
    out.write("\n  " if first[0] else ",\n  ")
    first[0] = False
    out.write(json.dumps(ev))


def write_kineto_trace(path: Path, ops: Sequence[SynthOp], steps: int = 1,
                       device_name: str = "NVIDIA H100 80GB HBM3", gap_us: float = 2.0,
                       compress: bool | None = None) -> None:
    """Write ``steps`` profiled steps, each launching ``ops`` in order on one GPU.

    Kernels of one stream run back to back, ``gap_us`` apart; CPU ops are 5 us long and
    launch their kernels 1 us in. ``compress`` defaults to a ``.gz`` suffix.
    """
    compress = path.suffix == ".gz" if compress is None else compress
    raw = gzip.open(path, "wt", encoding="utf-8", compresslevel=6) if compress else path.open(
        "w", encoding="utf-8")
    with raw as out:
        out.write('{\n"schemaVersion": 1,\n"deviceProperties": [\n  ')
        out.write(json.dumps({"id": 0, "name": device_name, "totalGlobalMem": 85045870592,
                              "computeMajor": 9, "computeMinor": 0, "numSms": 132}))
        out.write('\n],\n"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},')
        out.write('\n"traceEvents": [')
        first = [True]
        cpu_t, ext, corr = 1000.0, 1, 1
        gpu_t: dict[int, float] = {}
        for step in range(steps):
            step_start = cpu_t
            step_events: list[dict[str, Any]] = []
            for op in ops:
                args: dict[str, Any] = {"External id": ext, "Record function id": 0,
                                        "Input Dims": [list(d) for d in op.dims],
                                        "Input type": list(op.types), "Sequence number": ext,
                                        "Fwd thread id": 0, **op.extra}
                if op.comm is not None:
                    args.update(op.comm)
                _event(out, {"ph": "X", "cat": "cpu_op", "name": op.cpu_name, "pid": 1,
                             "tid": 1, "ts": cpu_t, "dur": 5.0, "args": args}, first)
                launch = cpu_t + 1.0
                for kname, dur in op.kernels:
                    _event(out, {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                                 "pid": 1, "tid": 1, "ts": launch, "dur": 0.5,
                                 "args": {"External id": ext, "cbid": 211,
                                          "correlation": corr}}, first)
                    start = max(gpu_t.get(op.stream, 0.0), launch + 4.0)
                    kargs = {"queued": 0, "device": 0, "context": 1, "stream": op.stream,
                             "correlation": corr, "registers per thread": 128,
                             "shared memory": 98304, "blocks per SM": 1.0,
                             "warps per SM": 8.0, "grid": [132, 1, 1], "block": [384, 1, 1],
                             "est. achieved occupancy %": 12}
                    if op.linked:
                        kargs["External id"] = ext
                    _event(out, {"ph": "X", "cat": "kernel", "name": kname, "pid": 0,
                                 "tid": op.stream, "ts": start, "dur": dur, "args": kargs},
                           first)
                    gpu_t[op.stream] = start + dur + gap_us
                    launch += 0.5
                    corr += 1
                cpu_t += 6.0
                ext += 1
            # the CPU waits for the GPU at the end of the step (optimizer.step, .item())
            cpu_t = max([cpu_t, *gpu_t.values()]) + 10.0
            step_events.append({"ph": "X", "cat": "user_annotation",
                                "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                                "ts": step_start - 1.0, "dur": cpu_t - step_start,
                                "args": {"External id": ext}})
            ext += 1
            for ev in step_events:
                _event(out, ev, first)
        out.write('\n],\n"traceName": "synthetic", "displayTimeUnit": "ms"\n}\n')


def write_nccl_tests_log(path: Path, binary: str, rows: Sequence[tuple[float, float]],
                         nranks: int, nodes: int = 1, inplace: Sequence[float] | None = None,
                         dtype: str = "float", elem_bytes: int = 4) -> None:
    """An nccl-tests stdout log: ``rows`` are (size in bytes, out-of-place time in us);
    ``inplace`` in-place times (default: the out-of-place ones)."""
    op = binary.removesuffix("_perf").removesuffix("_mpi").replace("alltoall", "all_to_all")
    redop = "sum" if op in ("all_reduce", "reduce_scatter") else "none"
    per_node = nranks // nodes
    lines = [f"# nThread 1 nGpus {per_node if nodes == 1 else 1} minBytes "
             f"{int(rows[0][0])} maxBytes {int(rows[-1][0])} step: 2(factor) warmup iters: 5 "
             f"iters: 20 agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    for r in range(nranks):
        lines.append(f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on node-{r // per_node:03d} "
                     f"device  {r % per_node} [0x{r:02x}] NVIDIA H100 80GB HBM3")
    lines += ["#", f"# Collective test starting: {binary}",
              "#                                                              out-of-place"
              "                       in-place          ",
              "#       size         count      type   redop    root     time   algbw   busbw"
              " #wrong     time   algbw   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
              "            (us)  (GB/s)  (GB/s)       "]
    factor = busbw_factor(op, nranks)
    total = 0.0
    for i, (size, t_us) in enumerate(rows):
        t_in = inplace[i] if inplace is not None else t_us
        cols = []
        for t in (t_us, t_in):
            alg = size / (t * 1e-6) / 1e9
            cols.append(f"{t:8.2f} {alg:7.2f} {alg * factor:7.2f}      0")
        total += size / (t_us * 1e-6) / 1e9 * factor
        lines.append(f"{int(size):12d} {int(size) // elem_bytes:13d} {dtype:>9s} {redop:>7s} "
                     f"{-1:7d} {cols[0]} {cols[1]}")
    lines += ["# Out of bounds values : 0 OK",
              f"# Avg bus bandwidth    : {total / len(rows):.4f} ", "#", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def write_reference_logs(data: Path, out_dir: Path) -> list[Path]:
    """Write each sweep of ``data`` (tests/ingest/data/*.yaml: per sweep ranks, nodes and
    rows [bytes, out-of-place time us, in-place busbw GB/s]) as an all_reduce_perf log."""
    from ruamel.yaml import YAML

    doc = YAML(typ="safe").load(data.read_text(encoding="utf-8"))
    paths = []
    for name, sweep in doc["sweeps"].items():
        n = sweep["ranks"]
        factor = busbw_factor("all_reduce", n)
        rows = [(float(b), float(t)) for b, t, _ in sweep["rows"]]
        # in-place time from its busbw (t = S·F / busbw); the out-of-place one where the
        # source printed 0.00 GB/s
        inplace = [b * factor / (bw * 1e9) * 1e6 if bw > 0 else t
                   for b, t, bw in sweep["rows"]]
        path = out_dir / f"all_reduce_perf_{name}.log"
        write_nccl_tests_log(path, "all_reduce_perf", rows, n, sweep["nodes"], inplace)
        paths.append(path)
    return paths
