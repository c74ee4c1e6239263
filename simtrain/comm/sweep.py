"""nccl-tests in simulation: time one collective over a range of message sizes.

Each size is simulated as a task graph holding that one collective on an otherwise idle
cluster; algbw = size / time and busbw = algbw x the op's factor, as nccl-tests define them
(doc/PERFORMANCE.md; ../shared/reference/nccl.yaml).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

from simtrain.comm.model import CommModel, busbw_factor
from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph
from simtrain.hardware.topology import Cluster


@dataclass(frozen=True)
class SweepRow:
    """One message size: the simulated time and nccl-tests' bandwidths (GB/s = 1e9 B/s)."""

    size_bytes: int
    time_s: float
    algbw_gbps: float
    busbw_gbps: float
    algorithm: str
    protocol: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def sizes(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """min, min·factor, ... up to max (inclusive), as nccl-tests' -b/-e/-f."""
    if min_bytes <= 0 or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"need 0 < min_bytes <= max_bytes and factor >= 2, got "
                         f"{min_bytes}, {max_bytes}, {factor}")
    out = [min_bytes]
    while out[-1] * factor <= max_bytes:
        out.append(out[-1] * factor)
    return out


def run_sweep(
    cluster: Cluster,
    comm: CommModel,
    op: str,
    ranks: Sequence[int],
    message_sizes: Sequence[int],
    algorithm: str = "auto",
    network: str = "flow",
) -> Iterator[SweepRow]:
    """Yield one row per size (a generator, so callers can show progress). ``network``
    is the engine's backend: "flow" (max-min flows) or "analytic" (the idle-network time,
    the same on an otherwise idle cluster and far cheaper on thousands of GPUs)."""
    factor = busbw_factor(op, len(ranks))
    for size in message_sizes:
        graph = TaskGraph(cluster.num_gpus)
        if op == "send_recv":
            graph.send_recv(ranks[0], ranks[1], size, op)
        else:
            graph.collective(op, ranks, size, op, algorithm=algorithm)
        timeline = execute(graph, cluster, comm=comm, network=network)
        span = timeline.spans[0]
        t = timeline.end
        algbw = size / t / 1e9 if t > 0 else 0.0
        yield SweepRow(size, t, algbw, algbw * factor, span.meta.get("algorithm", ""),
                       span.meta.get("protocol", ""))
