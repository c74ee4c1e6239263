"""The cluster as data: configuration (presets, overrides, custom graphs) and routed links.

``ClusterConfig`` is the scenario's ``cluster:`` section. ``build_cluster`` turns it into a
``Cluster``: a networkx DiGraph whose edges are directed ``Link``s (bytes/s per direction,
seconds of latency), plus deterministic, cached GPU-to-GPU routes the engine's flow model
uses. Graphs (preset shapes and ``custom:`` ones) are built in ``fabric.py``; the presets
live in ``presets.py``, the ``custom:`` schema in ``custom.py``.

Default latencies (per link; a route's latency is the sum over its links):
- nvlink 0.3 us: GPU->NVSwitch->GPU is 0.6 us, NCCL's NVLink hw latency per ring step
  (LL protocol, src/graph/tuning.cc, reference/nccl.yaml hw_latency_us.nvlink.ring[0]).
- pcie 0.5 us: GPU->PCIe switch->GPU is 1.0 us, NCCL's PCI hw latency (ring/tree LL).
- nic 1.0 us per NIC<->leaf link (NIC processing, cable, leaf forwarding): a same-leaf
  GPU->GPU route is 0.5+1+1+0.5 = 3.0 us, close to NCCL's 2.7 us net ring LL latency.
- switch 0.2 us per leaf<->spine link: InfiniBand switch port-to-port latency is of order
  100-200 ns (general knowledge, NVIDIA Quantum switch briefs), not from the reference.
"""

from __future__ import annotations

import copy
import operator
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache
from itertools import pairwise
from typing import Any, Literal

import networkx as nx
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from simtrain.engine.network import Endpoint, SwitchPort
from simtrain.hardware.custom import CustomLink, CustomTopology
from simtrain.hardware.fabric import (
    NODE_KINDS,
    FabricLayout,
    GraphBuilder,
    Link,
    build_custom_graph,
)
from simtrain.hardware.gpus import GPUSpec, get_gpu
from simtrain.hardware.presets import CLUSTER_PRESETS, LEAF_DOWN_PORTS, NVLS_ARCHS
from simtrain.units import Bandwidth, Seconds

__all__ = [
    "CLUSTER_PRESETS",
    "NODE_KINDS",
    "Cluster",
    "ClusterConfig",
    "CustomLink",
    "CustomTopology",
    "Link",
    "build_cluster",
]


class ClusterConfig(BaseModel):
    """The scenario's ``cluster:`` section: a preset merged with user overrides.

    ``None`` means "derived": NVLink/PCIe bandwidth from the GPU's line rate, one NIC per GPU,
    and ``nodes_per_leaf`` from a 64-port leaf (see LEAF_DOWN_PORTS). Naming ``preset`` merges
    that preset under the given fields here too, so ``ClusterConfig(preset="dgx-h100",
    nodes=4)`` works on its own. With ``custom`` the graph comes from the user and the
    shape fields (nodes, gpus_per_node, NICs, fabric) are ignored.
    """

    model_config = ConfigDict(extra="forbid")

    preset: str | None = None
    gpu: str | None = None
    nodes: int = 1
    gpus_per_node: int = 8
    intra_node: Literal["nvswitch", "pcie"] = "nvswitch"
    nvlink_bandwidth: Bandwidth | None = None
    nvlink_latency: Seconds = 0.3e-6
    pcie_bandwidth: Bandwidth | None = None
    pcie_latency: Seconds = 0.5e-6
    pcie_switches_per_node: int = 4
    # Socket-to-socket default 22 GB/s: NCCL's SRP_QPI_BW (topo.h, reference/nccl.yaml).
    cpu_link_bandwidth: Bandwidth = 22e9
    nics_per_node: int | None = None
    # One NDR 400 Gb/s port (reference/hardware.yaml), the current common NIC.
    nic_bandwidth: Bandwidth = 50e9
    nic_latency: Seconds = 1.0e-6
    fabric: Literal["rail-optimized", "fat-tree"] = "rail-optimized"
    oversubscription: float = 1.0
    nodes_per_leaf: int | None = None
    switch_latency: Seconds = 0.2e-6
    # NVLink SHARP (NVLS): None = derived, on where the GPUs sit on an NVSwitch that has it
    # (third-generation NVSwitch and later: HGX/DGX H100 and newer, NVL72); false turns it
    # off (NCCL_NVLS_ENABLE=0). ib_sharp: InfiniBand switches with SHARP enabled (CollNet).
    nvlink_sharp: bool | None = None
    ib_sharp: bool = False
    # Rack-scale NVLink domains: GPUs per compute tray and per Grace CPU (0 = not drawn).
    gpus_per_tray: int = 0
    gpus_per_cpu: int = 0
    # Host CPU vendor: NCCL caps multi-node LL bandwidth by it (simtrain.comm.backends).
    host_cpu: Literal["intel", "amd", "arm"] = "intel"
    custom: CustomTopology | None = None

    @model_validator(mode="before")
    @classmethod
    def _merge_preset(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("preset") is None:
            return data
        name = str(data["preset"]).strip().lower()
        if name not in CLUSTER_PRESETS:
            raise ValueError(f"unknown cluster preset {data['preset']!r}; use one of: "
                             f"{', '.join(CLUSTER_PRESETS)}")
        return {**CLUSTER_PRESETS[name], **data, "preset": name}

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str | None) -> str | None:
        return None if value is None else get_gpu(value).name

    @field_validator("gpus_per_tray", "gpus_per_cpu")
    @classmethod
    def _not_negative(cls, value: int, info: Any) -> int:
        if value < 0:
            raise ValueError(f"{info.field_name} must be >= 0 (0 = not modelled), got {value!r}")
        return value

    @field_validator("nodes", "gpus_per_node", "pcie_switches_per_node", "nodes_per_leaf")
    @classmethod
    def _at_least_one(cls, value: int | None, info: Any) -> int | None:
        if value is not None and value < 1:
            raise ValueError(f"{info.field_name} must be >= 1, got {value!r}")
        return value

    @field_validator("oversubscription")
    @classmethod
    def _oversub(cls, value: float) -> float:
        if not value >= 1.0:
            raise ValueError(f"oversubscription must be >= 1 (1 = non-blocking, 2 = half the "
                             f"uplink capacity), got {value!r}")
        return value

    @model_validator(mode="after")
    def _check(self) -> ClusterConfig:
        if self.custom is not None:
            if self.gpu is not None and self.gpu != self.custom.gpu:
                raise ValueError(f"cluster gpu {self.gpu!r} differs from custom.gpu "
                                 f"{self.custom.gpu!r}; set only one of them")
            self.gpu = self.custom.gpu
            return self
        if self.gpu is None:
            raise ValueError("cluster has no gpu; set e.g. gpu: h100-sxm, or a preset such as "
                             f"preset: dgx-h100 (presets: {', '.join(CLUSTER_PRESETS)})")
        if self.nics_per_node is not None and self.nics_per_node < 0:
            raise ValueError(f"nics_per_node must be >= 0, got {self.nics_per_node!r}")
        if self.nodes > 1 and self.nics_per_node == 0:
            raise ValueError(f"nics_per_node is 0 but nodes is {self.nodes}; servers need "
                             "at least one NIC to talk to each other")
        if self.intra_node == "nvswitch" and self.effective_nvlink_bandwidth <= 0:
            raise ValueError(f"gpu {self.gpu!r} has no NVLink, so intra_node 'nvswitch' "
                             "cannot work; set intra_node: pcie (or give nvlink_bandwidth)")
        if self.nvlink_sharp and not self._nvswitch_has_sharp:
            raise ValueError(f"nvlink_sharp is true but {self.gpu} on {self.intra_node} has "
                             "no NVSwitch with NVLink SHARP (Hopper or newer GPUs on an "
                             "NVSwitch); remove nvlink_sharp or choose such a GPU")
        return self

    @property
    def _nvswitch_has_sharp(self) -> bool:
        return self.intra_node == "nvswitch" and self.gpu_spec.arch in NVLS_ARCHS

    @property
    def effective_nvlink_sharp(self) -> bool:
        """NVLink SHARP usable: asked for (or derived) and present in the hardware."""
        wanted = True if self.nvlink_sharp is None else self.nvlink_sharp
        return wanted and self._nvswitch_has_sharp

    # ---- derived values (kept out of the stored fields so overrides stay consistent) ----
    @property
    def gpu_spec(self) -> GPUSpec:
        """Catalogue entry of the cluster's GPU."""
        return get_gpu(self.custom.gpu if self.custom else str(self.gpu))

    @property
    def effective_nvlink_bandwidth(self) -> float:
        if self.nvlink_bandwidth is not None:
            return self.nvlink_bandwidth
        return self.gpu_spec.nvlink_bandwidth

    @property
    def effective_pcie_bandwidth(self) -> float:
        if self.pcie_bandwidth is not None:
            return self.pcie_bandwidth
        return self.gpu_spec.pcie_bandwidth

    @property
    def effective_nics_per_node(self) -> int:
        return self.gpus_per_node if self.nics_per_node is None else self.nics_per_node

    @property
    def effective_nodes_per_leaf(self) -> int:
        if self.nodes_per_leaf is not None:
            return self.nodes_per_leaf
        if self.fabric == "rail-optimized":
            return LEAF_DOWN_PORTS
        return max(1, LEAF_DOWN_PORTS // max(1, self.effective_nics_per_node))

    def layout(self) -> FabricLayout:
        """Resolved numbers for the preset-shaped builder."""
        return FabricLayout(
            servers=self.nodes, gpus_per_node=self.gpus_per_node, intra_node=self.intra_node,
            nvlink_bandwidth=self.effective_nvlink_bandwidth, nvlink_latency=self.nvlink_latency,
            pcie_bandwidth=self.effective_pcie_bandwidth, pcie_latency=self.pcie_latency,
            pcie_switches=self.pcie_switches_per_node,
            cpu_link_bandwidth=self.cpu_link_bandwidth,
            nics_per_node=self.effective_nics_per_node, nic_bandwidth=self.nic_bandwidth,
            nic_latency=self.nic_latency, fabric=self.fabric,
            oversubscription=self.oversubscription,
            nodes_per_leaf=self.effective_nodes_per_leaf, switch_latency=self.switch_latency,
            nvlink_sharp=self.effective_nvlink_sharp, ib_sharp=self.ib_sharp,
            gpus_per_tray=self.gpus_per_tray, gpus_per_cpu=self.gpus_per_cpu,
        )


class Cluster:
    """A built topology: the link graph, rank placement and cached GPU-to-GPU routes."""

    def __init__(
        self,
        *,
        config: ClusterConfig,
        gpu_spec: GPUSpec,
        builder: GraphBuilder,
        gpus: list[str],
        servers: list[int],
        path_fn: Callable[[int, int], list[str]],
        switch_fn: Callable[[int, str], str | None] | None = None,
        switch_path_fn: Callable[[int, str], list[str]] | None = None,
    ) -> None:
        self.config = config
        self.gpu_spec = gpu_spec
        self._builder = builder
        self.links: list[Link] = builder.links
        self._edge_ids = builder.edge_ids
        self.gpus = gpus
        self.num_gpus = len(gpus)
        self._servers = servers
        per_server = Counter(servers)
        self.num_servers = len(per_server)
        self.gpus_per_server = max(per_server.values())
        self._path_fn = path_fn
        self._switch_fn = switch_fn
        self._switch_path_fn = switch_path_fn
        self._routes: dict[tuple[Endpoint, Endpoint], tuple[int, ...]] = {}
        # Preset-built clusters wire every server alike, so a group's idle-network cost
        # depends only on its shape (rank offsets and position inside a server).
        self.uniform = config.custom is None

    @property
    def graph(self) -> nx.DiGraph:
        """The topology graph (networkx), built on first use."""
        return self._builder.graph

    @property
    def node_attrs(self) -> dict[str, dict[str, Any]]:
        """Node attributes by name (``kind``, ``server``, ...) without building the graph."""
        return self._builder.node_attrs

    def successors(self) -> dict[str, list[str]]:
        """Each node's link destinations in the graph's adjacency order (no graph built)."""
        return self._builder.successors()

    def with_link_slowdowns(self, slowdowns: Sequence[tuple[tuple[str, str], float]]
                            ) -> Cluster:
        """A copy whose cables ``(a, b)`` (both directions) carry bandwidth / slowdown;
        factors for the same cable multiply. Routes are shared (same links, same ids); the
        copy is not uniform (its servers are no longer wired alike)."""
        factor: dict[int, float] = {}
        for (a, b), slow in slowdowns:
            for key in ((a, b), (b, a)):
                if key in self._edge_ids:
                    i = self._edge_ids[key]
                    factor[i] = factor.get(i, 1.0) * slow
        if not factor:
            return self
        out = copy.copy(self)
        out.links = [replace(lk, bandwidth=lk.bandwidth / factor[lk.id]) if lk.id in factor
                     else lk for lk in self.links]
        out.uniform = False
        return out

    def _check_rank(self, rank: int) -> int:
        try:
            index = operator.index(rank)  # accepts numpy integers, rejects floats
        except TypeError:
            index = -1
        if isinstance(rank, bool) or not 0 <= index < self.num_gpus:
            raise ValueError(f"rank {rank!r} is not a GPU of this cluster; ranks are "
                             f"0..{self.num_gpus - 1}")
        return index

    def server_of(self, rank: int) -> int:
        """Server (node) index that GPU ``rank`` sits in."""
        return self._servers[self._check_rank(rank)]

    def path(self, src_rank: int, dst_rank: int) -> list[str]:
        """Node names along the route (for display and debugging)."""
        route = self.route(src_rank, dst_rank)
        if not route:
            return [self.gpus[src_rank]]
        return [self.links[route[0]].src] + [self.links[i].dst for i in route]

    def reducing_switch(self, rank: int, level: str) -> str | None:
        """The switch of ``level`` above GPU ``rank`` if it reduces in the network, else None
        (custom graphs declare none)."""
        if self._switch_fn is None:
            return None
        return self._switch_fn(self._check_rank(rank), level)

    def _switch_route(self, src: Endpoint, dst: Endpoint) -> tuple[int, ...]:
        if isinstance(src, SwitchPort) and isinstance(dst, SwitchPort):
            raise ValueError(f"no route between two switches ({src} -> {dst})")
        port = src if isinstance(src, SwitchPort) else dst
        assert isinstance(port, SwitchPort)
        if self._switch_path_fn is None or self.reducing_switch(port.rank, port.level) is None:
            raise ValueError(f"GPU {port.rank} has no {port.level} that reduces in the network")
        nodes = self._switch_path_fn(self._check_rank(port.rank), port.level)
        if port is src:
            nodes = nodes[::-1]
        return tuple(self._edge_ids[(u, v)] for u, v in pairwise(nodes))

    def route(self, src_rank: Endpoint, dst_rank: Endpoint) -> tuple[int, ...]:
        """Link ids from ``src_rank`` to ``dst_rank``; () for the same rank. Cached per pair.

        Either end may be a ``SwitchPort`` (in-network reduction): the route then runs
        between the GPU and its reducing switch.
        """
        cached = self._routes.get((src_rank, dst_rank))
        if cached is not None:
            return cached
        if isinstance(src_rank, SwitchPort) or isinstance(dst_rank, SwitchPort):
            switched = self._switch_route(src_rank, dst_rank)
            self._routes[(src_rank, dst_rank)] = switched
            return switched
        src_rank, dst_rank = self._check_rank(src_rank), self._check_rank(dst_rank)
        key = (src_rank, dst_rank)
        if src_rank == dst_rank:
            route: tuple[int, ...] = ()
        else:
            ids = self._edge_ids
            nodes = self._path_fn(src_rank, dst_rank)
            route = tuple(ids[(u, v)] for u, v in pairwise(nodes))
        self._routes[key] = route
        return route

    def route_latency(self, route: tuple[int, ...]) -> float:
        """Sum of link latencies along ``route`` (seconds)."""
        return sum(self.links[i].latency for i in route)

    def route_bandwidth(self, route: tuple[int, ...]) -> float:
        """Bottleneck (minimum) link bandwidth along ``route``; inf for an empty route."""
        return min((self.links[i].bandwidth for i in route), default=float("inf"))

    def describe(self) -> list[dict[str, Any]]:
        """One row per link class (kind, endpoint kinds, bandwidth, latency) with counts:
        ``directed`` links and ``count`` cables (a link and its reverse in the same class
        are one cable)."""
        kind_of = {name: d["kind"] for name, d in self.node_attrs.items()}
        links, ids = self.links, self._edge_ids

        def paired(lk: Link) -> bool:
            back = ids.get((lk.dst, lk.src))
            if back is None:
                return False
            rev = links[back]
            return (rev.kind, rev.bandwidth, rev.latency) == (lk.kind, lk.bandwidth, lk.latency)

        # One pass over the links (a quarter of a million at 16k GPUs) into a Counter.
        classes = Counter((lk.kind, kind_of[lk.src], kind_of[lk.dst], lk.bandwidth,
                           lk.latency, paired(lk)) for lk in links)
        rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        for (kind, src, dst, bandwidth, latency, two_way), n in classes.items():
            ends = sorted((src, dst))
            key = (kind, *ends, bandwidth, latency)
            row = rows.setdefault(key, {"kind": kind, "between": f"{ends[0]}-{ends[1]}",
                                        "bandwidth": bandwidth, "latency": latency,
                                        "count": 0.0, "directed": 0})
            row["directed"] += n
            row["count"] += n / 2 if two_way else n
        for row in rows.values():
            row["count"] = round(row["count"])
        return list(rows.values())  # in the order each class first appears among the links


def build_cluster(cfg: ClusterConfig) -> Cluster:
    """Build the topology graph and routing for ``cfg`` (preset shape or custom graph).

    Clusters are immutable once built (only their route cache grows), so the last few are
    kept by configuration: validating a scenario and simulating it build one graph, not
    two — at 16k GPUs the graph is the largest setup cost.
    """
    return _built(cfg.model_dump_json())


@lru_cache(maxsize=4)
def _built(key: str) -> Cluster:
    return _build_cluster(ClusterConfig.model_validate_json(key))


def _build_cluster(cfg: ClusterConfig) -> Cluster:
    if cfg.custom is not None:
        custom = cfg.custom
        builder = build_custom_graph(custom)
        graph, gpus = builder.graph, list(custom.gpus)

        def custom_path(src: int, dst: int) -> list[str]:
            # Hop-count shortest path; BFS follows link insertion order, so deterministic.
            path: list[str] = nx.shortest_path(graph, gpus[src], gpus[dst])
            return path

        servers = [graph.nodes[name]["server"] for name in gpus]
        return Cluster(config=cfg, gpu_spec=cfg.gpu_spec, builder=builder, gpus=gpus,
                       servers=servers, path_fn=custom_path)
    layout = cfg.layout()
    builder = layout.build()
    gpn = cfg.gpus_per_node
    return Cluster(
        config=cfg, gpu_spec=cfg.gpu_spec, builder=builder,
        gpus=[layout.gpu(s, g) for s in range(cfg.nodes) for g in range(gpn)],
        servers=[s for s in range(cfg.nodes) for _ in range(gpn)],
        path_fn=layout.path, switch_fn=layout.reducing_switch,
        switch_path_fn=layout.switch_path,
    )
