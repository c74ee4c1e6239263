"""User-described topologies: ``cluster: {custom: {gpus, switches, links}}``, validated."""

from __future__ import annotations

from typing import Literal

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from simtrain.hardware.gpus import get_gpu
from simtrain.units import Bandwidth, Seconds


class CustomLink(BaseModel):
    """One user-described link; bidirectional links get the bandwidth in each direction."""

    model_config = ConfigDict(extra="forbid")

    a: str
    b: str
    kind: Literal["nvlink", "pcie", "ib", "ethernet", "qpi"]
    bandwidth: Bandwidth
    latency: Seconds = 0.0
    bidirectional: bool = True


class CustomTopology(BaseModel):
    """A user-written graph: GPUs (rank i = gpus[i]), switches, and the links between them."""

    model_config = ConfigDict(extra="forbid")

    gpu: str
    gpus: list[str]
    nodes_of: dict[str, int] | None = None
    switches: list[str] = Field(default_factory=list)
    links: list[CustomLink]

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str) -> str:
        return get_gpu(value).name

    @model_validator(mode="after")
    def _check_graph(self) -> CustomTopology:
        if not self.gpus:
            raise ValueError("custom topology lists no gpus; add e.g. gpus: [g0, g1]")
        names = self.gpus + self.switches
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise ValueError(f"custom topology node {name!r} is listed twice; names "
                                 "must be unique across gpus and switches")
            seen.add(name)
        for gpu_name, server in (self.nodes_of or {}).items():
            if gpu_name not in self.gpus:
                raise ValueError(f"nodes_of names {gpu_name!r}, which is not in gpus "
                                 f"{self.gpus}; fix the name or add it to gpus")
            if server < 0:
                raise ValueError(f"nodes_of[{gpu_name!r}] = {server} must be >= 0")
        pairs: set[tuple[str, str]] = set()
        for i, link in enumerate(self.links):
            for end in (link.a, link.b):
                if end not in seen:
                    raise ValueError(f"links[{i}] names unknown node {end!r}; declare it "
                                     "under gpus or switches")
            if link.a == link.b:
                raise ValueError(f"links[{i}] connects {link.a!r} to itself; remove it")
            dirs = [(link.a, link.b), (link.b, link.a)] if link.bidirectional else [
                (link.a, link.b)]
            for d in dirs:
                if d in pairs:
                    raise ValueError(f"links[{i}] duplicates link {d[0]!r}->{d[1]!r}; "
                                     "merge them into one link with the summed bandwidth")
                pairs.add(d)
        graph = nx.DiGraph(list(pairs))
        graph.add_nodes_from(names)
        root = self.gpus[0]
        forward, backward = nx.descendants(graph, root), nx.ancestors(graph, root)
        for name in self.gpus[1:]:
            if name not in forward or name not in backward:
                way = f"{root!r} -> {name!r}" if name not in forward else f"{name!r} -> {root!r}"
                raise ValueError(f"custom topology: no path {way}; every GPU must reach every "
                                 "other GPU, add links (or make them bidirectional)")
        return self
