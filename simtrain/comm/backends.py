"""Communication backend profiles: NCCL, Gloo, MPI — latencies, protocols, link efficiency.

A backend says which algorithms exist per op, which protocols it has (NCCL's LL, LL128,
Simple; one "Simple" protocol elsewhere), the latency of a collective launch and of one
algorithm step over a link class, how much of a link's line rate its transfers reach, and
which algorithm/protocol it picks for a call. An "ideal" profile (zero overheads, line
rate) exists for checking lowerings against closed forms.

NCCL constants: NVIDIA/nccl src/graph/tuning.cc and topo.h, NCCL 2.30.7 (commit 5067397c),
transcribed in ../shared/reference/nccl.yaml. Protocol wire factors: LL sends 8-byte lines
of 4 data + 4 flag bytes (x2 on the wire); LL128 and the tree's bandwidth factors follow
tuning.cc's refinements (0.92 for LL128 ring; tree LL /3.8; tree LL128 7/9 on one node,
120/128 across nodes); Simple moves payload only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

US = 1e-6
PROTOCOLS = ("LL", "LL128", "Simple")

# tuning.cc baseLat[algo][proto] (us), NCCL 2.30.7. Other algorithms use the ring's row;
# NVLS, NVLSTree and CollNet (in-network reduction) have no base latency, only hw rows.
_NCCL_BASE = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "nvls": (0.0, 0.0, 0.0),
              "nvls_tree": (0.0, 0.0, 0.0), "collnet": (0.0, 0.0, 0.0)}
# tuning.cc hwLat[link][algo][proto] (us): per step over NVLink, PCIe, network. collnet is
# NCCL's collnet_direct row; NVLS and CollNet implement only the Simple protocol.
_NCCL_HW = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": (0.0, 0.0, 25.0),
               "nvls_tree": (0.0, 0.0, 25.0), "collnet": (0.0, 0.0, 3.7)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "nvls": (0.0, 0.0, 0.0),
            "nvls_tree": (0.0, 0.0, 0.0), "collnet": (0.0, 0.0, 3.7)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "nvls": (0.0, 0.0, 18.0),
            "nvls_tree": (0.0, 0.0, 20.9), "collnet": (0.0, 0.0, 31.0)},
}
# tuning.cc nvlsEfficiency by arch: the share of NVLink payload bandwidth NVSwitch
# multimem reductions and multicasts reach (0 = no NVLink SHARP before Hopper).
_NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74}
# tuning.cc treeCorrectionFactor[proto][log2(nBytes/64)]: the share of the tree's modelled
# all-reduce bandwidth NCCL's developers measure by message size (pipeline start-up and
# chunking at mid sizes); structure and range (0.4-1.0): reference/nccl.yaml latency_model.
# VERIFIED against NCCL 2.30.7 itself: read from libnccl.so.2 of the nvidia-nccl-cu13 2.30.7
# wheel, where tuning.cc's static tables lie in order in .rodata: this float[3][24] table
# directly before baseLat and hwLat, whose 2.30.7 values (../shared/reference/nccl.yaml)
# follow it byte for byte (benchmarks/nccl_tables.py reads them). The LL128 row differs
# from the one written from memory before (1.0 up to 128 KiB, 0.7 from 4 MiB): it dips to
# 0.6 between 64 KiB and 2 MiB and recovers to 0.8-1.0 from 4 MiB.
_TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0,
           1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9,
              .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7,
               .8, .9, .9, .9),
}
# Algorithms whose reduction happens in a switch; they run the Simple protocol only.
IN_NETWORK = ("nvls", "nvls_tree", "collnet")
# tuning.cc llMaxBws (GB/s), index by node count 1, 2, 4+. NCCL picks the row by GPU arch
# on one node and by host CPU vendor across nodes ("for single node, we look at GPU type;
# for multi-node, we look at CPU type"): row 0 (its Volta/Intel row) for Intel and every
# non-AMD CPU, row 1 (Ampere/AMD) for AMD; the Hopper and Blackwell rows' multi-node
# entries are never read (reference/nccl.yaml index_meaning).
_NCCL_LL_MAX = {"volta": (39.0, 39.0, 20.4), "ampere": (87.7, 22.5, 19.0),
                "hopper": (141.0, 45.0, 35.0), "blackwell": (282.0, 90.0, 70.0)}
_LL_ROW_BY_CPU = {"intel": "volta", "arm": "volta", "amd": "ampere"}
# tuning.cc perChMaxNVLSTreeBw (GB/s per NVLS-graph channel), by node count 1, 2, 4+,
# NCCL 2.30.7 (reference/nccl.yaml): the bus bandwidth one NVLSTree channel reaches, as
# NCCL's developers measured it (its tuner caps busBw at nChannels x this). The NVLS
# graph has one channel per NIC of a node, each headed by the GPU next to that NIC
# (NCCL connect.cc: the NVLS heads are the NVLS graph's channels; UNVERIFIED, written from
# the source as remembered: not in ../shared/reference). Range: 1 to the node's GPUs.
_NVLS_TREE_CHANNEL_MAX = {"hopper": (0.0, 57.7, 45.5), "blackwell": (0.0, 96.0, 80.0)}
# NVLink bandwidth NCCL's topology search assumes per link (topo.h SMxx_NVLINK_BW, GB/s)
# over the per-link line rate (25 GB/s NVLink2-4, 50 GB/s NVLink5): the fraction of line
# rate SM-driven NVLink copies reach with 128-byte payloads (sjeaugey, nccl-tests#149:
# "~20GB/s effective with a 128B payload" of 25). 12 A100 links -> 240 GB/s (measured ~230);
# 18 H100 links x 20.6 = 370.8 GB/s (maintainer: ~370).
_NVLINK_EFFICIENCY = {"volta": 20.0 / 25, "ampere": 20.0 / 25, "hopper": 20.6 / 25,
                      "blackwell": 40.1 / 50, "cdna3": 0.8}
# InfiniBand/RoCE: NCCL reaches 24 of 25 GB/s on HDR (nccl#412) and 48-49 of 50 on NDR
# (nccl-tests#267): 0.96. PCIe: topo.h models a Gen3 x16 path at 12 of 16 GB/s: 0.75.
_LINK_EFFICIENCY = {"ib": 0.96, "ethernet": 0.96, "pcie": 0.75, "qpi": 1.0}


@dataclass(frozen=True)
class TuningTables:
    """NCCL's cost-model constants (tuning.cc): latencies in us by algorithm family and
    protocol, per-hop latencies by link class, the LL bus-bandwidth cap by GPU arch, and
    the tree's Simple-protocol bandwidth factor (0.92)."""

    base_us: Mapping[str, tuple[float, float, float]]
    hop_us: Mapping[str, Mapping[str, tuple[float, float, float]]]
    ll_max_gbps: Mapping[str, tuple[float, float, float]]
    tree_simple_factor: float = 0.92
    net_overhead_us: float = 1.0  # tuning.cc netOverhead, Intel/other CPUs (AMD: 2.0)


NCCL_TUNING = TuningTables(base_us=_NCCL_BASE, hop_us=_NCCL_HW, ll_max_gbps=_NCCL_LL_MAX)


def _family(algorithm: str) -> str:
    """NCCL's tables have rows for tree, ring, NVLS, NVLSTree and CollNet; every other
    algorithm uses the ring's."""
    return algorithm if algorithm in ("tree", "nvls", "nvls_tree", "collnet") else "ring"


def link_class(kinds: set[str], same_server: bool) -> str:
    """NCCL's latency class of a hop: "nvlink", "pci" inside a server, "net" across."""
    if not same_server:
        return "net"
    return "nvlink" if "nvlink" in kinds else "pci"


@dataclass(frozen=True)
class Backend:
    """A collective library's cost profile; see the module docstring for sources."""

    name: str
    protocols: tuple[str, ...]
    # Algorithms the library implements, per op; "auto" chooses among ``auto_algorithms``.
    algorithms: Mapping[str, tuple[str, ...]]
    auto_algorithms: Mapping[str, tuple[str, ...]]
    # Fixed per-step software latency (s) added to the hop's route latency (non-NCCL).
    step_overhead: float = 0.0
    launch_latency: float = 0.0
    # Per-flow rate limit (bytes/s): e.g. staging through host memory.
    flow_cap: float = float("inf")
    link_efficiency: Mapping[str, float] = field(default_factory=dict)
    # Fixed size rules instead of a cost model, as MPICH does: per op, (max bytes,
    # algorithm) pairs tried in order; an algorithm that cannot run (e.g. halving-doubling
    # on a non-power-of-two group) falls through to the next rule.
    size_rules: Mapping[str, tuple[tuple[float, str], ...]] = field(default_factory=dict)
    # NCCL's cost-model tables; None for libraries described by the fields above alone.
    tuning: TuningTables | None = None

    # -- latency ---------------------------------------------------------------------------
    def base_latency(self, algorithm: str, protocol: str) -> float:
        """Seconds paid once per collective launch."""
        if self.tuning is not None:
            return self.tuning.base_us[_family(algorithm)][PROTOCOLS.index(protocol)] * US
        return self.launch_latency

    def hop_latency(self, route_latency: float, cls: str, algorithm: str, protocol: str,
                    multi_node: bool = False) -> float:
        """Alpha of one step over a hop of class ``cls`` with the given route latency.

        NCCL (tuning.cc): when a call spans nodes, an intra-node step costs at least the
        network proxy's overhead, netOverhead = 1 us (Intel CPUs; x3 for Simple)."""
        if self.tuning is not None:
            row = self.tuning.hop_us[cls][_family(algorithm)]
            alpha = max(route_latency, row[PROTOCOLS.index(protocol)] * US)
            if multi_node and cls != "net":
                overhead = self.tuning.net_overhead_us * (3 if protocol == "Simple" else 1)
                alpha = max(alpha, overhead * US)
            return alpha
        return route_latency + self.step_overhead

    def latency_factor(self, op: str, algorithm: str, protocol: str, nodes: int,
                       arch: str) -> float:
        """NCCL's 'plateau effect' (tuning.cc): a multi-node ring all-reduce on Simple pays
        1.4x its latency on SM80 and newer, 1.9x before; 1 elsewhere."""
        if (self.tuning is None or op != "all_reduce" or algorithm != "ring"
                or protocol != "Simple" or nodes <= 1):
            return 1.0
        return 1.9 if arch == "volta" else 1.4

    def switch_latency(self, cls: str, algorithm: str, protocol: str) -> float:
        """Alpha of an in-network reduction through a switch of link class ``cls``
        ("nvlink" or "net"): NCCL's hwLat row for the algorithm (0 for other backends).
        NVLS through the NVSwitch: 0 here; its latency is the pipeline model's
        (simtrain.comm.nvls_pipeline), which replaces NCCL's lumped 25 us."""
        if self.tuning is None:
            return self.launch_latency
        if algorithm in ("nvls", "nvls_tree") and cls == "nvlink":
            return 0.0
        return self.tuning.hop_us[cls][_family(algorithm)][PROTOCOLS.index(protocol)] * US

    def supports(self, algorithm: str, protocol: str) -> bool:
        """Whether ``algorithm`` runs with ``protocol`` (in-network ones: Simple only)."""
        return protocol == "Simple" or algorithm not in IN_NETWORK

    # -- bandwidth -------------------------------------------------------------------------
    def efficiency(self, kind: str, arch: str) -> float:
        """Fraction of a link's line rate this backend's transfers reach."""
        if kind == "nvlink":
            return self.link_efficiency.get("nvlink", _NVLINK_EFFICIENCY.get(arch, 0.8))
        return self.link_efficiency.get(kind, 1.0)

    def wire_factor(self, algorithm: str, protocol: str, nodes: int, arch: str = "") -> float:
        """Bytes on the wire per payload byte (the protocol's bandwidth cost); for NVLS
        reduce-scatter and all-gather the inverse of NVSwitch's multimem efficiency
        (tuning.cc nvlsEfficiency; NVLS all-reduce: simtrain.comm.nvls_pipeline)."""
        if algorithm == "nvls" and self.tuning is not None:
            return 1 / _NVLS_EFFICIENCY.get(arch, 1.0)
        if protocol == "LL":
            # Ring LL x2: VERIFIED against NCCL 2.30.7's ncclTopoTuneModel (disassembled
            # from libnccl.so.2: for a == RING && p == LL, busBw = min(busBw * 0.5,
            # llMaxBw), every op; 2.26.2's constant pool holds the same 0.5 and no 1/3).
            # NCCL 2.13.4 (RCCL rocm-5.4.3's tuning.cc, non-HIP branch) had 1/4 for
            # all-reduce and multi-node, 1/3 otherwise: series older than 2.26 may differ.
            return 3.8 if algorithm == "tree" else 2.0
        if protocol == "LL128":
            if algorithm == "tree":
                return 9 / 7 if nodes == 1 else 128 / 120
            return 1 / 0.92
        if self.tuning is not None and algorithm == "tree":
            return 1 / self.tuning.tree_simple_factor
        return 1.0

    def size_efficiency(self, op: str, algorithm: str, protocol: str, nbytes: float) -> float:
        """Share of its bandwidth an algorithm reaches at this message size: NCCL's tree
        all-reduce correction by log2(n/64) (``_TREE_CORRECTION``); 1 otherwise."""
        if self.tuning is None or algorithm != "tree" or op != "all_reduce" or nbytes < 64:
            return 1.0
        row = _TREE_CORRECTION[protocol]
        index = int(nbytes) >> 6
        log_size = index.bit_length() - 1
        return row[log_size] if log_size < len(row) else 1.0

    def nvls_tree_cap(self, arch: str, nodes: int, heads: int) -> float:
        """Upper bound on an NVLSTree all-reduce's bus bandwidth (bytes/s): ``heads`` NVLS
        channels (one per NIC of a node) at NCCL's per-channel maximum for ``nodes``."""
        row = _NVLS_TREE_CHANNEL_MAX.get(arch)
        if self.tuning is None or row is None or nodes < 2:
            return float("inf")
        return heads * row[min(nodes, 4).bit_length() - 1] * 1e9

    def bandwidth_cap(self, protocol: str, arch: str, nodes: int, cpu: str = "intel") -> float:
        """Upper bound on a rank's bus bandwidth (bytes/s) for ``protocol`` (NCCL's LL cap:
        llMaxBws by GPU ``arch`` on one node, by host ``cpu`` vendor across nodes)."""
        if self.tuning is not None and protocol == "LL":
            table = self.tuning.ll_max_gbps
            key = arch if nodes <= 1 else _LL_ROW_BY_CPU.get(cpu, "volta")
            row = table.get(key, table["ampere"])
            return row[min(nodes, 4).bit_length() - 1] * 1e9
        return float("inf")


_ALL_ALGORITHMS = {
    "all_reduce": ("ring", "tree", "bidirectional_ring", "binomial", "recursive_doubling",
                   "halving_doubling", "hierarchical", "ring_2d", "nvls", "collnet",
                   "nvls_tree"),
    "reduce_scatter": ("ring", "bidirectional_ring", "halving_doubling", "nvls"),
    "all_gather": ("ring", "bidirectional_ring", "recursive_doubling", "halving_doubling",
                   "nvls"),
    "broadcast": ("ring", "binomial"),
    "reduce": ("ring", "binomial"),
    "scatter": ("direct", "binomial"),
    "gather": ("direct", "binomial"),
    "all_to_all": ("direct", "pairwise"),
    "all_to_all_v": ("direct", "pairwise"),
    "send_recv": ("direct",),
    "barrier": ("dissemination",),
}

NCCL = Backend(
    name="nccl",
    protocols=PROTOCOLS,
    algorithms=_ALL_ALGORITHMS,
    # NCCL's tuner weighs ring, tree, NVLS and CollNet for all-reduce, ring and NVLS for
    # reduce-scatter and all-gather; the in-network ones only where the hardware reduces
    # (an NVSwitch with NVLink SHARP, SHARP InfiniBand switches). Its all-to-all and
    # scatter/gather are grouped send/recv, all peers at once.
    # NVLSTree (nvls_tree) runs only when asked for (NCCL_ALGO=NVLSTree): timed by
    # simtrain's flows it would beat the ring at 4 nodes and on 20 NVL72 racks, where NCCL's
    # own tuner evidently does not pick it (docs/collectives.md, "NVLSTree").
    auto_algorithms={"all_reduce": ("ring", "tree", "nvls", "collnet"),
                     "reduce_scatter": ("ring", "nvls"), "all_gather": ("ring", "nvls"),
                     "scatter": ("direct",), "gather": ("direct",),
                     "all_to_all": ("direct",), "all_to_all_v": ("direct",)},
    link_efficiency=_LINK_EFFICIENCY,
    tuning=NCCL_TUNING,
)

# Gloo (pytorch/gloo): CPU collectives over TCP. GPU tensors are staged through host
# memory, and intra-node traffic does not use NVLink; we cap each flow at an assumed
# 10 GB/s host-staging rate (pinned-memory copies plus TCP; an assumption, not measured)
# and add an assumed 20 us per message for the kernel TCP stack. Gloo implements ring,
# ring-chunked and halving-doubling all-reduce, one-to-all broadcast and pairwise
# all-to-all (gloo/allreduce.h, broadcast.h, alltoall.h).
GLOO = Backend(
    name="gloo",
    protocols=("Simple",),
    algorithms={"all_reduce": ("ring", "halving_doubling", "binomial"),
                "reduce_scatter": ("ring", "halving_doubling"), "all_gather": ("ring",),
                "broadcast": ("binomial", "ring"), "reduce": ("binomial", "ring"),
                "scatter": ("direct",), "gather": ("direct",),
                "all_to_all": ("pairwise", "direct"), "all_to_all_v": ("pairwise", "direct"),
                "send_recv": ("direct",), "barrier": ("dissemination",)},
    # gloo::allreduce runs the ring unless told otherwise (AllreduceOptions::Algorithm).
    auto_algorithms={"all_reduce": ("ring",)},
    step_overhead=20 * US,
    launch_latency=20 * US,
    flow_cap=10e9,
    link_efficiency={"ib": 0.9, "ethernet": 0.9, "pcie": 0.75, "nvlink": 1.0},
)

# MPI (MPICH/Open MPI, CUDA-aware): algorithm choice by message size after Thakur,
# Rabenseifner and Gropp (IJHPCA 2005): recursive doubling below 2 KiB, Rabenseifner's
# halving-doubling above (ring when the group is not a power of two); binomial broadcast
# for short messages; pairwise all-to-all. About 2 us of software latency per message
# (typical UCX/verbs small-message latency; an assumption).
_INF = float("inf")
MPI = Backend(
    name="mpi",
    protocols=("Simple",),
    algorithms={**_ALL_ALGORITHMS, "all_reduce": ("recursive_doubling", "halving_doubling",
                                                  "ring", "binomial"),
                "reduce_scatter": ("ring", "bidirectional_ring", "halving_doubling"),
                "all_gather": ("ring", "bidirectional_ring", "recursive_doubling",
                               "halving_doubling")},
    auto_algorithms={},
    size_rules={
        "all_reduce": ((2048, "recursive_doubling"), (_INF, "halving_doubling"),
                       (_INF, "ring")),
        "all_gather": ((512 * 1024, "recursive_doubling"), (_INF, "ring")),
        "reduce_scatter": ((_INF, "halving_doubling"), (_INF, "ring")),
        "broadcast": ((12 * 1024, "binomial"), (_INF, "ring")),
        "reduce": ((2048, "binomial"), (_INF, "ring")),
        "scatter": ((_INF, "binomial"),), "gather": ((_INF, "binomial"),),
        "all_to_all": ((_INF, "pairwise"),), "all_to_all_v": ((_INF, "pairwise"),),
    },
    step_overhead=2 * US,
    launch_latency=2 * US,
    link_efficiency={"ib": 0.96, "ethernet": 0.96, "pcie": 0.75, "nvlink": 0.8},
)

# Zero overheads at line rate: the alpha-beta closed forms exactly (tests, what-ifs).
IDEAL = Backend(name="ideal", protocols=("Simple",), algorithms=_ALL_ALGORITHMS,
                auto_algorithms={}, link_efficiency={"nvlink": 1.0, "ib": 1.0,
                                                     "ethernet": 1.0, "pcie": 1.0})

BACKENDS: dict[str, Backend] = {b.name: b for b in (NCCL, GLOO, MPI, IDEAL)}
