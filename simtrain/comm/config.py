"""The scenario's ``comm:`` section: which collective library and how it chooses."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from simtrain.comm.algorithms import ALGORITHMS
from simtrain.comm.fitted import FittedLevel
from simtrain.comm.model import CommModel
from simtrain.engine.network import Fabric
from simtrain.errors import ScenarioError
from simtrain.units import Seconds

_ALL_NAMES = sorted({name for table in ALGORITHMS.values() for name in table})


class CommConfig(BaseModel):
    """Collective communication settings shared by every process group.

    ``backend`` picks the cost profile (nccl by default; gloo, mpi; ideal = line rate and
    no software latency). ``algorithm`` forces one algorithm wherever the op has it,
    ``algorithms`` per op (e.g. ``{all_reduce: tree}``); ``protocol`` forces NCCL's LL,
    LL128 or Simple. ``collective_latency`` overrides the backend's launch latency.
    """

    model_config = ConfigDict(extra="forbid")

    backend: Literal["nccl", "gloo", "mpi", "ideal"] = "nccl"
    algorithm: str = "auto"
    algorithms: dict[str, str] = Field(default_factory=dict)
    protocol: Literal["auto", "LL", "LL128", "Simple"] = "auto"
    collective_latency: Seconds | None = None
    fitted: list[FittedLevel] = Field(default_factory=list)

    @field_validator("algorithm")
    @classmethod
    def _known_algorithm(cls, value: str) -> str:
        if value != "auto" and value not in _ALL_NAMES:
            raise ValueError(f"unknown algorithm {value!r}; expected auto or one of: "
                             f"{', '.join(_ALL_NAMES)}")
        return value

    @field_validator("algorithms")
    @classmethod
    def _known_per_op(cls, value: dict[str, str]) -> dict[str, str]:
        for op, name in value.items():
            if op not in ALGORITHMS:
                raise ValueError(f"unknown collective {op!r}; expected one of: "
                                 f"{', '.join(ALGORITHMS)}")
            if name != "auto" and name not in ALGORITHMS[op]:
                raise ValueError(f"{op} has no algorithm {name!r}; expected auto or one of: "
                                 f"{', '.join(ALGORITHMS[op])}")
        return value

    def build(self, fabric: Fabric, arch: str) -> CommModel:
        """The communication model for ``fabric`` with GPUs of architecture ``arch``."""
        forced = dict(self.algorithms)
        if self.algorithm != "auto":
            forced.setdefault("*", self.algorithm)
        _check_in_network(forced, fabric)
        return CommModel(fabric, self.backend, arch=arch, algorithms=forced,
                         protocol=self.protocol, launch_latency=self.collective_latency,
                         fitted=self.fitted)


# In-network algorithms and the switch level they need above every GPU.
_NVLINK_SHARP = ("NVSwitch SHARP (NVLink SHARP: Hopper or newer GPUs on an NVSwitch; cluster "
                 "nvlink_sharp not false)")
_NEEDS = {"nvls": ("nvswitch", _NVLINK_SHARP), "nvls_tree": ("nvswitch", _NVLINK_SHARP),
          "collnet": ("leaf", "InfiniBand SHARP switches (cluster ib_sharp: true, more than "
                      "one node)")}


def _check_in_network(forced: dict[str, str], fabric: Fabric) -> None:
    """A forced NVLS or CollNet on hardware without it is bad input, caught before running."""
    switch = getattr(fabric, "reducing_switch", None)
    for op, name in forced.items():
        if name not in _NEEDS:
            continue
        level, what = _NEEDS[name]
        if switch is None or switch(0, level) is None:
            where = "comm.algorithm" if op == "*" else f"comm.algorithms.{op}"
            raise ScenarioError(f"{name} needs {what}; this cluster has none; use auto, ring "
                                "or tree", field=where)
