"""The parts of a PyTorch profiler (Kineto) trace the importer needs, read in one pass.

Kineto writes Chrome trace events (times in microseconds, converted to seconds here):
- GPU kernels: ``cat: kernel``, ``ph: X``, ``args: {device, stream, correlation,
  "External id"}``; ``gpu_memcpy``/``gpu_memset`` are counted, not kept;
- CPU ops: ``cat: cpu_op`` with ``"External id"`` and, under ``record_shapes=True``,
  ``"Input Dims"`` and ``"Input type"``; ``record_param_comms`` ops carry NCCL message
  sizes (``"In msg nelems"``, ``"Out msg nelems"``, ``"Group size"``, ``dtype``);
- runtime calls: ``cat: cuda_runtime``/``cuda_driver`` with the launch's ``correlation``;
- steps: ``ProfilerStep#N`` annotations spanning each profiled step.

A kernel's "External id" is the innermost CPU op active when it was launched (the
aten::mm under aten::linear), which is the op whose shapes describe it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simtrain.ingest import IngestError
from simtrain.ingest.jsonstream import TraceEvents

US = 1e-6
# Event categories by Kineto version: PyTorch >= 1.11 writes the lower-case names, 1.8-1.10
# wrote "Kernel", "Operator" and "Runtime".
_CATEGORY = {"kernel": "kernel", "Kernel": "kernel", "cpu_op": "cpu_op", "Operator": "cpu_op",
             "cuda_runtime": "runtime", "cuda_driver": "runtime", "Runtime": "runtime",
             "gpu_memcpy": "memcpy", "gpu_memset": "memcpy", "Memcpy": "memcpy",
             "Memset": "memcpy"}
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_COMM_KEYS = ("In msg nelems", "Out msg nelems", "Group size", "dtype")


@dataclass(frozen=True, slots=True)
class Kernel:
    """One GPU kernel execution (seconds on the trace's clock)."""

    name: str
    ts: float
    dur: float
    device: int
    stream: int
    ext: int | None
    corr: int | None


@dataclass(frozen=True, slots=True)
class CpuOp:
    """The shapes and (for collectives) message arguments of a CPU op."""

    name: str
    dims: tuple[Any, ...]
    types: tuple[str, ...]
    comm: tuple[Any, ...] | None = None  # In msg nelems, Out msg nelems, Group size, dtype


@dataclass
class KinetoTrace:
    """Kernels, their CPU ops, launch times and step windows of one trace file."""

    path: Path
    kernels: list[Kernel] = field(default_factory=list)
    ops: dict[int, CpuOp] = field(default_factory=dict)
    launches: dict[int, float] = field(default_factory=dict)  # correlation -> launch ts
    steps: dict[int, tuple[float, float]] = field(default_factory=dict)
    device_names: list[str] = field(default_factory=list)
    events: int = 0
    memcpy: int = 0

    def step_kernels(self, step: int | None) -> list[Kernel]:
        """Kernels launched during ProfilerStep#``step`` (all kernels for None)."""
        if step is None:
            return self.kernels
        if step not in self.steps:
            have = ", ".join(map(str, sorted(self.steps))) or "none (no ProfilerStep#N)"
            raise IngestError(self.path, f"--step {step} is not in the trace; steps: {have}")
        start, end = self.steps[step]
        out = []
        for k in self.kernels:
            launched = self.launches.get(k.corr, k.ts) if k.corr is not None else k.ts
            if start <= launched < end:
                out.append(k)
        return out


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def scan_trace(path: Path) -> KinetoTrace:
    """Stream ``path`` (plain or gzip) into a KinetoTrace, kernels or not."""
    trace = KinetoTrace(path)
    events = TraceEvents(path)
    _collect(trace, events)
    for dev in events.meta.get("deviceProperties", []) or []:
        if isinstance(dev, dict) and isinstance(dev.get("name"), str):
            trace.device_names.append(dev["name"])
    return trace


def read_trace(path: Path) -> KinetoTrace:
    """``scan_trace``, with an IngestError if the trace holds no GPU kernels."""
    trace = scan_trace(path)
    if not trace.kernels:
        raise IngestError(path, f"no GPU kernel events (cat 'kernel') among {trace.events} "
                          "events; expected a torch.profiler trace recorded with "
                          "ProfilerActivity.CUDA")
    return trace


def _collect(trace: KinetoTrace, events: Iterable[dict[str, Any]]) -> None:
    kernels, ops, launches, steps = trace.kernels, trace.ops, trace.launches, trace.steps
    intern = sys.intern
    n = 0
    for ev in events:
        n += 1
        if ev.get("ph") != "X" or "dur" not in ev:
            continue
        cat = _CATEGORY.get(str(ev.get("cat")), "")
        args = ev.get("args") or {}
        if cat == "kernel":
            ext = args.get("External id", args.get("external id"))
            kernels.append(Kernel(intern(str(ev.get("name", ""))), float(ev["ts"]) * US,
                                  float(ev["dur"]) * US, _int(args.get("device")) or 0,
                                  _int(args.get("stream")) or 0, _int(ext),
                                  _int(args.get("correlation"))))
        elif cat == "cpu_op":
            name = str(ev.get("name", ""))
            ext = _int(args.get("External id"))
            if ext is not None and ("Input Dims" in args or "Group size" in args):
                comm = tuple(args.get(k) for k in _COMM_KEYS) if "Group size" in args else None
                ops[ext] = CpuOp(intern(name), _freeze(args.get("Input Dims", ())),
                                 tuple(intern(str(t)) for t in args.get("Input type", ())),
                                 comm)
            _step(steps, name, ev)
        elif cat == "runtime":
            corr = _int(args.get("correlation"))
            if corr is not None:
                launches[corr] = float(ev["ts"]) * US
        elif cat == "memcpy":
            trace.memcpy += 1
        else:
            _step(steps, str(ev.get("name", "")), ev)
    trace.events = n


def _step(steps: dict[int, tuple[float, float]], name: str, ev: dict[str, Any]) -> None:
    if name.startswith("ProfilerStep#") and (m := _STEP.match(name)):
        if ev.get("cat") == "gpu_user_annotation":
            return  # the CPU-side window decides which launches belong to the step
        start = float(ev["ts"]) * US
        steps[int(m.group(1))] = (start, start + float(ev["dur"]) * US)


def _freeze(dims: Any) -> tuple[Any, ...]:
    if not isinstance(dims, list):
        return ()
    return tuple(tuple(d) if isinstance(d, list) and all(type(x) is int for x in d) else ()
                 for d in dims)
