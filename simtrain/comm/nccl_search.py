"""NCCL 2.26.2's ring/tree channel search (graph/search.cc) on an NVSwitch node, closed form.

NCCL builds its ring and tree channels by a depth-first search over the node's topology
(``ncclTopoCompute`` -> ``ncclTopoSearchRec``): every channel is one path NET -> GPU ->
... -> GPU -> NET that takes ``bw`` GB/s from every link it crosses, at one speed ``bw``
of a fixed speed table. What it ends with, read from the nvidia-nccl-cu12 2.26.2 wheel's
libnccl.so.2 (x86-64, symbols kept; ``objdump -d`` of the functions named, addresses in
that file):

- Speeds (``.data``): with a NIC in the system ``sm90/sm100SpeedArrayInter`` (0xf6f1ba0,
  0xf6f1b00): 48, 45, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12
  GB/s (``SPEEDS_INTER``). The search starts at the first speed <= ``system->maxBw`` (the
  best GPU->NIC path's bandwidth) whose minChannels copies fit the GPU's NVLink total
  (``ncclTopoCompute`` 0x9df4b).
- Stopping rule (``ncclTopoCompute`` 0x9e00d-0x9e2db): a search that finds
  nChannels x bw >= totalBw (the GPU's NVLink total) is optimal and stops; otherwise
  pass 1 lowers the speed one entry at a time while next / best > 0.49 (the double at
  0x192f90), keeping a graph only if nChannels x bw is strictly larger
  (``ncclTopoCompareGraphs`` 0x981e4); pass 2 raises it again with minChannels fixed.
  Time budgets: 256 calls of ``ncclTopoSearchRecGpu`` with sameChannels, 16,384 without,
  2^19 over all searches (0x9dfbe: ``sbb/and 0x3f00/add 0x100``; 0x9df83: 0x80000).
- On an NVSwitch node the next GPU of a ring is only the GPU index - 1 or + 1
  (``ncclTopoSearchNextGpuSort`` 0x97d80-0x97e25: with NVS nodes it returns at most
  those two), so a channel is one walk around the GPU indices and costs G + 2 calls: a
  search over a 72-GPU node completes 15 channels in about 15 x 74 = 1,110 of its 16,384
  calls. The budget is not what stops it; the links are. ``ring_channels`` therefore
  counts what the links allow (the search run to completion).
- Each channel takes ``bw`` from one NIC (``ncclTopoSearchRecNet`` 0x9a1ba subtracts it
  from every NET of the same port; ring channels leave by the NIC they came in by unless
  crossNic), and ``bw`` from every GPU's NVLink to the switch in each direction.
- ``ncclTopoDupChannels`` (0x9d680): doubles the channels (halving bw) unless bw < 25, or
  compute capability > 80 with bw < 50 and more than 4 channels (floats 25.0, 50.0 at
  0x192f78/0x192f7c).

The tree graph is searched with minChannels = maxChannels = the ring's count
(``initTransportsRank`` 0x6c5d6; ``ncclTopoCompareGraphs`` 0x981b3 rejects fewer), so both
get the same channels; at run time ``ncclTopoPostset`` runs each graph channel twice,
capped at 64 channels (0xb0504), which changes no total.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# sm90SpeedArrayInter == sm100SpeedArrayInter in 2.26.2 (.data 0xf6f1ba0 / 0xf6f1b00),
# GB/s per channel; pre-Hopper speedArrayInter (0xf6f1c40) differs.
SPEEDS_INTER: tuple[float, ...] = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5,
                                   15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)
SPEEDS_INTER_PRE_SM90: tuple[float, ...] = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0,
                                            10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2,
                                            0.24, 0.12)
_LOWER_WHILE = 0.49       # ncclTopoCompute: keep lowering while next / best > 0.49
_DUP_MIN_BW = 25.0        # ncclTopoDupChannels: no duplication below 25 GB/s
_DUP_SM80_BW = 50.0       # ... nor, above SM80, below 50 GB/s with more than 4 channels


@dataclass(frozen=True, slots=True)
class SearchResult:
    """A searched graph: ``channels`` channels of ``bw`` GB/s each (after duplication)."""

    channels: int
    bw: float

    @property
    def total(self) -> float:
        """nChannels x bw, what NCCL's tuner multiplies into its bus bandwidth (GB/s)."""
        return self.channels * self.bw


def channels_at(speed: float, nvlink_bw: float, nics: int, nic_path_bw: float,
                max_channels: int) -> int:
    """Channels a completed search finds at ``speed`` GB/s: every channel takes ``speed``
    from each GPU's NVLink total ``nvlink_bw`` and from one NIC path of ``nic_path_bw``."""
    if speed <= 0:
        raise ValueError(f"speed must be positive, got {speed}")
    per_nic = math.floor(nic_path_bw / speed + 1e-9)
    return max(0, min(max_channels, math.floor(nvlink_bw / speed + 1e-9), nics * per_nic))


def ring_search(nvlink_bw: float, nics: int, nic_path_bw: float, max_channels: int,
                speeds: tuple[float, ...] = SPEEDS_INTER) -> SearchResult:
    """NCCL 2.26.2's ring graph on a multi-node NVSwitch system, before duplication.

    ``nvlink_bw``: a GPU's NVLink total to the switch (NCCL's totalBw, GB/s); ``nics``:
    NICs in the (fused) node; ``nic_path_bw``: the GPU->NIC path's bandwidth (maxBw:
    min of C2C/PCIe and the NIC's rate); ``max_channels``: the graph's cap.
    """
    index = next((i for i, s in enumerate(speeds) if s <= nic_path_bw and s <= nvlink_bw),
                 len(speeds) - 1)
    best = SearchResult(0, 0.0)
    while True:
        found = channels_at(speeds[index], nvlink_bw, nics, nic_path_bw, max_channels)
        if found * speeds[index] > best.total:
            best = SearchResult(found, speeds[index])
        if best.channels and best.total >= nvlink_bw:   # optimal: stop
            return best
        nxt = index + 1
        if nxt >= len(speeds) or (best.channels and speeds[nxt] / best.bw <= _LOWER_WHILE):
            return best
        index = nxt


def dup_channels(graph: SearchResult, compute_capability: int,
                 max_channels: int) -> SearchResult:
    """``ncclTopoDupChannels``: twice the channels at half the bandwidth, where allowed."""
    if graph.channels == 0 or graph.bw < _DUP_MIN_BW:
        return graph
    if compute_capability > 80 and graph.bw < _DUP_SM80_BW and graph.channels > 4:
        return graph
    doubled = min(2 * graph.channels, max_channels)
    return SearchResult(doubled, graph.bw / math.ceil(doubled / graph.channels))
