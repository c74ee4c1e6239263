"""Graph builders for preset-shaped clusters: servers, NVSwitch or PCIe boxes, leaf/spine fabrics.

``topology.py`` owns the user-facing configuration and the ``Cluster`` object; this module
turns resolved numbers (``FabricLayout``) into a networkx graph of directed links and computes
routes *structurally* (by arithmetic on ranks), which is what keeps a 16k-GPU cluster cheap:
no all-pairs shortest paths, and equal-cost choices (which spine) follow a fixed rule.

Shapes (one logical node per physical device class; bandwidths are per direction):
- NVSwitch box: GPU <-nvlink-> one logical NVSwitch per server; GPU <-pcie-> its NIC.
- PCIe box: GPU <-pcie-> PCIe switch <-pcie-> CPU socket <-qpi-> other socket; NICs hang
  off PCIe switches.
- Network (only when there is more than one server): NIC <-ib-> leaf <-ib-> spine.
  Rail-optimized: NIC k of every server in a scalable unit of ``nodes_per_leaf`` servers goes
  to that unit's rail-k leaf. Fat tree: all NICs of ``nodes_per_leaf`` servers share one
  leaf. Every leaf connects to every spine; a leaf's total uplink capacity is its downlink
  capacity divided by the oversubscription.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import networkx as nx

if TYPE_CHECKING:
    from simtrain.hardware.custom import CustomTopology

# NVLink-C2C between a Grace CPU and its GPUs: 900 GB/s bidirectional, 450 per direction
# (NVIDIA GB200 NVL72 and Grace Hopper product pages; general knowledge, not in reference).
C2C_BANDWIDTH = 450e9

NODE_KINDS = ("gpu", "nvswitch", "pcie_switch", "cpu", "nic", "leaf", "spine")


@dataclass(frozen=True, slots=True)
class Link:
    """One DIRECTED link; ``bandwidth`` is bytes/s in this direction, ``latency`` seconds."""

    id: int
    src: str
    dst: str
    kind: str
    bandwidth: float
    latency: float


class GraphBuilder:
    """Accumulates nodes and directed links; link ids are assigned in insertion order.

    The networkx graph is made on first use of ``graph`` (custom routing, topology
    reports): preset clusters route by formula and only need ``links`` and ``edge_ids``,
    so a 16k-GPU cluster skips building a quarter-million-edge graph it never reads.
    """

    def __init__(self) -> None:
        self.links: list[Link] = []
        self.edge_ids: dict[tuple[str, str], int] = {}
        self._nodes: list[tuple[str, dict[str, Any]]] = []
        self._graph: nx.DiGraph | None = None

    def node(self, name: str, kind: str, **attrs: Any) -> None:
        """Add a node of ``kind`` (one of NODE_KINDS) with extra attributes."""
        self._nodes.append((name, {"kind": kind, **attrs}))
        self._graph = None

    def link(
        self,
        a: str,
        b: str,
        kind: str,
        bandwidth: float,
        latency: float,
        bidirectional: bool = True,
    ) -> None:
        """Add a->b (and b->a when bidirectional), each direction with the full bandwidth."""
        for src, dst in ((a, b), (b, a)) if bidirectional else ((a, b),):
            link_id = len(self.links)
            self.links.append(Link(link_id, src, dst, kind, bandwidth, latency))
            self.edge_ids[(src, dst)] = link_id
        self._graph = None

    @property
    def node_attrs(self) -> dict[str, dict[str, Any]]:
        """Every node's attributes (``kind`` and extras) by name, in insertion order; cheap:
        reports read this instead of building the networkx graph."""
        return dict(self._nodes)

    def successors(self) -> dict[str, list[str]]:
        """Each node's link destinations, in link insertion order (the graph's adjacency
        order), without building the networkx graph."""
        out: dict[str, list[str]] = {name: [] for name, _ in self._nodes}
        for lk in self.links:
            out.setdefault(lk.src, []).append(lk.dst)
        return out

    @property
    def graph(self) -> nx.DiGraph:
        """The topology as a networkx DiGraph (node kind/attrs; edge kind, bandwidth,
        latency and link id), built on first use."""
        if self._graph is None:
            graph = nx.DiGraph()
            graph.add_nodes_from(self._nodes)
            graph.add_edges_from(
                (lk.src, lk.dst, {"kind": lk.kind, "bandwidth": lk.bandwidth,
                                  "latency": lk.latency, "id": lk.id})
                for lk in self.links)
            self._graph = graph
        return self._graph


@dataclass(frozen=True)
class FabricLayout:
    """Resolved numbers of a preset-shaped cluster (SI units); see module docstring."""

    servers: int
    gpus_per_node: int
    intra_node: str  # "nvswitch" | "pcie"
    nvlink_bandwidth: float
    nvlink_latency: float
    pcie_bandwidth: float
    pcie_latency: float
    pcie_switches: int
    cpu_link_bandwidth: float
    nics_per_node: int
    nic_bandwidth: float
    nic_latency: float
    fabric: str  # "rail-optimized" | "fat-tree"
    oversubscription: float
    nodes_per_leaf: int
    switch_latency: float
    # In-network reduction: NVLink SHARP in the NVSwitch (NVLS) and SHARP in the
    # InfiniBand leaves and spines (CollNet); switch nodes carry ``reduce=True``.
    nvlink_sharp: bool = False
    ib_sharp: bool = False
    # Rack-scale boxes (GB200/GB300 NVL72): GPUs per compute tray and per Grace CPU
    # (0 = no CPU nodes drawn), joined to their Grace by NVLink-C2C.
    gpus_per_tray: int = 0
    gpus_per_cpu: int = 0

    # ---- derived sizes -------------------------------------------------------------
    @property
    def sockets(self) -> int:
        """CPU sockets of a PCIe box: two (dual-socket server) unless there is one switch."""
        return 2 if self.pcie_switches >= 2 else 1

    @property
    def units(self) -> int:
        """Groups of ``nodes_per_leaf`` servers (scalable units / leaf groups)."""
        return math.ceil(self.servers / self.nodes_per_leaf)

    @property
    def rails(self) -> int:
        """Leaves per unit: one per NIC index when rail-optimized, else one."""
        return self.nics_per_node if self.fabric == "rail-optimized" else 1

    @property
    def num_leaves(self) -> int:
        return self.units * self.rails if self.servers > 1 else 0

    @property
    def ports_down(self) -> int:
        """NIC ports under one leaf, as designed (a partly filled last unit keeps its uplinks)."""
        per_leaf_servers = min(self.nodes_per_leaf, self.servers)
        nics_on_leaf = 1 if self.fabric == "rail-optimized" else self.nics_per_node
        return per_leaf_servers * nics_on_leaf

    @property
    def num_spines(self) -> int:
        """Spines: one per full-speed uplink port a leaf needs; none with a single leaf."""
        if self.num_leaves <= 1:
            return 0
        # 1e-9 guards against 32/1.0000000001 style rounding up to an extra spine.
        return max(1, math.ceil(self.ports_down / self.oversubscription - 1e-9))

    @property
    def uplink_bandwidth(self) -> float:
        """Per leaf->spine link: total uplink (= downlink / oversubscription) over the spines."""
        if self.num_spines == 0:
            return 0.0
        total_up = self.ports_down * self.nic_bandwidth / self.oversubscription
        return total_up / self.num_spines

    # ---- naming and placement ------------------------------------------------------
    @staticmethod
    def gpu(server: int, local: int) -> str:
        return f"n{server}.gpu{local}"

    @staticmethod
    def nvswitch(server: int) -> str:
        return f"n{server}.nvswitch"

    @staticmethod
    def nic(server: int, k: int) -> str:
        return f"n{server}.nic{k}"

    @staticmethod
    def pcie_switch(server: int, j: int) -> str:
        return f"n{server}.pcie{j}"

    @staticmethod
    def cpu(server: int, c: int) -> str:
        return f"n{server}.cpu{c}"

    @staticmethod
    def spine(j: int) -> str:
        return f"spine{j}"

    def leaf(self, server: int, k: int) -> str:
        """Leaf that NIC ``k`` of ``server`` plugs into."""
        unit = server // self.nodes_per_leaf
        if self.fabric == "rail-optimized":
            return f"leaf{unit}.rail{k}"
        return f"leaf{unit}"

    def nic_of_gpu(self, local: int) -> int:
        """NIC index a GPU uses: GPUs are spread evenly (DGX-2: GPUs 2k, 2k+1 share NIC k)."""
        return local * self.nics_per_node // self.gpus_per_node

    def gpu_of_nic(self, k: int) -> int:
        """The first GPU (local index) that uses NIC ``k`` (``nic_of_gpu``'s inverse)."""
        return -(-k * self.gpus_per_node // self.nics_per_node)

    def switch_of_gpu(self, local: int) -> int:
        return local * self.pcie_switches // self.gpus_per_node

    def switch_of_nic(self, k: int) -> int:
        return k * self.pcie_switches // self.nics_per_node

    def socket_of_switch(self, j: int) -> int:
        return j * self.sockets // self.pcie_switches

    # ---- building ------------------------------------------------------------------
    def build(self) -> GraphBuilder:
        """Emit every node and link, in a fixed order (so link ids are reproducible)."""
        b = GraphBuilder()
        gpn = self.gpus_per_node
        multi = self.servers > 1
        for s in range(self.servers):
            for g in range(gpn):
                tray = {"tray": g // self.gpus_per_tray} if self.gpus_per_tray else {}
                b.node(self.gpu(s, g), "gpu", rank=s * gpn + g, server=s, local_rank=g,
                       **tray)
            if self.intra_node == "nvswitch":
                self._build_nvswitch_box(b, s, multi)
            else:
                self._build_pcie_box(b, s, multi)
        if multi:
            self._build_network(b)
        return b

    def _build_nvswitch_box(self, b: GraphBuilder, s: int, multi: bool) -> None:
        b.node(self.nvswitch(s), "nvswitch", server=s, reduce=self.nvlink_sharp)
        for g in range(self.gpus_per_node):
            b.link(self.gpu(s, g), self.nvswitch(s), "nvlink",
                   self.nvlink_bandwidth, self.nvlink_latency)
        if self.gpus_per_cpu:
            for c in range(math.ceil(self.gpus_per_node / self.gpus_per_cpu)):
                b.node(self.cpu(s, c), "cpu", server=s, model="grace")
            for g in range(self.gpus_per_node):
                b.link(self.gpu(s, g), self.cpu(s, g // self.gpus_per_cpu), "nvlink",
                       C2C_BANDWIDTH, self.nvlink_latency)
        if not multi:
            return
        for k in range(self.nics_per_node):
            b.node(self.nic(s, k), "nic", server=s)
        for g in range(self.gpus_per_node):
            # DGX boxes put each GPU and its NIC under one PCIe switch; modelled as one link.
            b.link(self.gpu(s, g), self.nic(s, self.nic_of_gpu(g)), "pcie",
                   self.pcie_bandwidth, self.pcie_latency)

    def _build_pcie_box(self, b: GraphBuilder, s: int, multi: bool) -> None:
        for c in range(self.sockets):
            b.node(self.cpu(s, c), "cpu", server=s)
        if self.sockets == 2:
            b.link(self.cpu(s, 0), self.cpu(s, 1), "qpi",
                   self.cpu_link_bandwidth, self.pcie_latency)
        for j in range(self.pcie_switches):
            b.node(self.pcie_switch(s, j), "pcie_switch", server=s)
            # The switch's x16 uplink to its root complex is shared by the GPUs below it.
            b.link(self.pcie_switch(s, j), self.cpu(s, self.socket_of_switch(j)), "pcie",
                   self.pcie_bandwidth, self.pcie_latency)
        for g in range(self.gpus_per_node):
            b.link(self.gpu(s, g), self.pcie_switch(s, self.switch_of_gpu(g)), "pcie",
                   self.pcie_bandwidth, self.pcie_latency)
        if not multi:
            return
        for k in range(self.nics_per_node):
            b.node(self.nic(s, k), "nic", server=s)
            b.link(self.nic(s, k), self.pcie_switch(s, self.switch_of_nic(k)), "pcie",
                   self.pcie_bandwidth, self.pcie_latency)

    def _build_network(self, b: GraphBuilder) -> None:
        leaves: list[str] = []
        for u in range(self.units):
            for k in range(self.rails):
                name = self.leaf(u * self.nodes_per_leaf, k)
                b.node(name, "leaf", unit=u, rail=k, reduce=self.ib_sharp)
                leaves.append(name)
        for j in range(self.num_spines):
            b.node(self.spine(j), "spine", reduce=self.ib_sharp)
        for s in range(self.servers):
            for k in range(self.nics_per_node):
                b.link(self.nic(s, k), self.leaf(s, k), "ib",
                       self.nic_bandwidth, self.nic_latency)
        for name in leaves:
            for j in range(self.num_spines):
                b.link(name, self.spine(j), "ib", self.uplink_bandwidth, self.switch_latency)

    # ---- routing -------------------------------------------------------------------
    def path(self, src: int, dst: int) -> list[str]:
        """Node names from GPU rank ``src`` to GPU rank ``dst`` (src != dst).

        Between NVSwitch servers of a rail-optimized fabric, traffic to a GPU on another
        rail (NIC index) first crosses NVLink to the source server's GPU on the
        destination's rail and leaves through that GPU's NIC, so it never crosses rails in
        the network (under a fat tree every NIC shares a leaf: no relay): NCCL's PXN, on
        by default since NCCL 2.12 for send/recv and all-to-all (NCCL_PXN_DISABLE=0,
        NCCL_P2P_PXN_LEVEL=2: "always use PXN"; NVIDIA blog "Doubling all2all Performance
        with NVIDIA Collective Communication Library 2.12", 2022). Without it, a regular
        layout's cross-rail flows all pick one spine. Which spine: ``spine_toward``.
        """
        sa, ga = divmod(src, self.gpus_per_node)
        sb, gb = divmod(dst, self.gpus_per_node)
        if sa == sb:
            if self.intra_node == "nvswitch":
                return [self.gpu(sa, ga), self.nvswitch(sa), self.gpu(sb, gb)]
            return self._pcie_path(sa, self.gpu(sa, ga), self.switch_of_gpu(ga),
                                   self.gpu(sb, gb), self.switch_of_gpu(gb))
        ka, kb = self.nic_of_gpu(ga), self.nic_of_gpu(gb)
        hop: list[str] = []
        if ka != kb and self.fabric == "rail-optimized" and self.intra_node == "nvswitch":
            # PXN (NCCL >= 2.12, on by default): a cross-rail send first moves over NVLink
            # to the source server's GPU on the destination's rail, which sends it on its
            # own NIC, so it never crosses a spine between rails (NVIDIA blog "Doubling
            # all2all Performance with NVIDIA Collective Communication Library 2.12", 2022).
            hop = [self.gpu(sa, ga), self.nvswitch(sa)]
            ga, ka = self.gpu_of_nic(kb), kb
        up = hop + self._gpu_to_nic(sa, ga, ka)
        down = self._gpu_to_nic(sb, gb, kb)[::-1]
        la, lb = self.leaf(sa, ka), self.leaf(sb, kb)
        if la == lb:
            middle = [la]
        else:
            middle = [la, self.spine(self.spine_toward(sb, kb)), lb]
        return up + middle + down

    def spine_toward(self, server: int, nic: int) -> int:
        """Index of the spine that carries traffic bound for NIC ``nic`` of ``server``.

        InfiniBand switches forward by destination: each holds a linear forwarding table
        from destination LID to output port, and OpenSM's fat-tree routing (ftree) gives a
        leaf's destinations its up ports in turn, the destination-mod-k rule (Zahavi et
        al., "Optimized InfiniBand fat-tree routing for shift all-to-all communication
        patterns", CCPE 2010; Gomez et al., "Deterministic versus adaptive routing in
        fat-trees", IPDPS 2007). So the NICs under one leaf each own one spine (ports
        share one when the leaf is oversubscribed), and distinct destinations never meet
        on an uplink; flows to one NIC share its spine, as its downlink is shared anyway.
        (The rule used before, (src + dst) mod spines, sent every server-pair copy of a
        pipeline send to half the spines: 16 flows per uplink.)"""
        port = server % self.nodes_per_leaf
        if self.fabric != "rail-optimized":
            port = port * self.nics_per_node + nic
        return port % self.num_spines

    def reducing_switch(self, rank: int, level: str) -> str | None:
        """Name of the switch of ``level`` ("nvswitch", "leaf", "spine") above GPU ``rank``
        when it can reduce in the network, else None.

        A rank's spine is fixed by its rail (NIC index k -> spine k mod spines), so the
        GPUs of one rail meet at one SHARP aggregation root.
        """
        s, g = divmod(rank, self.gpus_per_node)
        if level == "nvswitch":
            ok = self.intra_node == "nvswitch" and self.nvlink_sharp
            return self.nvswitch(s) if ok else None
        if not self.ib_sharp or self.servers <= 1:
            return None
        k = self.nic_of_gpu(g)
        if level == "leaf":
            return self.leaf(s, k)
        if level == "spine" and self.num_spines > 0:
            return self.spine(k % self.num_spines)
        return None

    def switch_path(self, rank: int, level: str) -> list[str]:
        """Node names from GPU ``rank`` up to its reducing switch of ``level``."""
        switch = self.reducing_switch(rank, level)
        if switch is None:
            raise ValueError(f"GPU {rank} has no {level} that reduces in the network")
        s, g = divmod(rank, self.gpus_per_node)
        if level == "nvswitch":
            return [self.gpu(s, g), switch]
        k = self.nic_of_gpu(g)
        up = self._gpu_to_nic(s, g, k) + [self.leaf(s, k)]
        return up if level == "leaf" else [*up, switch]

    def _gpu_to_nic(self, s: int, g: int, k: int) -> list[str]:
        if self.intra_node == "nvswitch":
            return [self.gpu(s, g), self.nic(s, k)]
        return self._pcie_path(s, self.gpu(s, g), self.switch_of_gpu(g),
                               self.nic(s, k), self.switch_of_nic(k))

    def _pcie_path(self, s: int, a: str, sw_a: int, b: str, sw_b: int) -> list[str]:
        """Endpoint a under switch sw_a to endpoint b under sw_b, via CPU sockets if needed."""
        if sw_a == sw_b:
            return [a, self.pcie_switch(s, sw_a), b]
        ca, cb = self.socket_of_switch(sw_a), self.socket_of_switch(sw_b)
        cpus = [self.cpu(s, ca)] if ca == cb else [self.cpu(s, ca), self.cpu(s, cb)]
        return [a, self.pcie_switch(s, sw_a), *cpus, self.pcie_switch(s, sw_b), b]


def _switch_kind(kinds: list[str], touches_gpu: bool) -> str:
    """Node kind of a custom switch, inferred from the kinds of links it carries."""
    if "qpi" in kinds:
        return "cpu"
    if "nvlink" in kinds:
        return "nvswitch"
    if "ib" in kinds or "ethernet" in kinds:
        return "leaf" if touches_gpu else "spine"
    return "pcie_switch"


def build_custom_graph(custom: CustomTopology) -> GraphBuilder:
    """Graph of a user-described topology (already validated: names known, GPUs connected).

    Switch kinds are inferred: qpi -> cpu, nvlink -> nvswitch, ib/ethernet -> leaf when a GPU
    hangs off it directly else spine, pcie only -> pcie_switch.
    """
    nodes_of = custom.nodes_of or {}
    gpu_set = set(custom.gpus)
    b = GraphBuilder()
    for rank, name in enumerate(custom.gpus):
        b.node(name, "gpu", rank=rank, server=nodes_of.get(name, 0))
    for name in custom.switches:
        ends = [lk for lk in custom.links if name in (lk.a, lk.b)]
        touches_gpu = any(lk.a in gpu_set or lk.b in gpu_set for lk in ends)
        b.node(name, _switch_kind([lk.kind for lk in ends], touches_gpu))
    for lk in custom.links:
        b.link(lk.a, lk.b, lk.kind, lk.bandwidth, lk.latency, lk.bidirectional)
    return b
