"""The input of ``simtrain plan``: what to train, on what, and how to search (a plan file).

A plan file (or the equivalent flags) has ``model``, ``cluster`` (one node count or a list),
``training`` (total tokens, sequence length, global batch) and optional ``search``,
``goodput``, ``compute`` and ``comm`` sections; docs/planning.md lists every key.
"""

from __future__ import annotations

import io
import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from simtrain.errors import ScenarioError
from simtrain.parallel.schedule import SCHEDULES as PIPELINE_SCHEDULES
from simtrain.study.goodput import GoodputConfig, goodput_config
from simtrain.study.variability import Jitter
from simtrain.workload.memory import RECOMPUTE_MODES

ZERO_STAGES = (0, 1, 2, 3)
SCHEDULES = tuple(PIPELINE_SCHEDULES)  # every registered pipeline schedule
# p99: the final runs' 99th-percentile step over the ``variability`` section's jittered steps.
RANK_BY = ("time", "cost", "pareto", "p99")
# Rank orders searched by default, innermost first: Megatron-LM's (TP, CP, PP, DP; Llama 3
# §3.3.2) and torchtitan's device mesh (pp outermost, then dp, cp, tp innermost).
DEFAULT_ORDERS = ("tp-cp-pp-dp", "tp-cp-dp-pp")
ALL_ORDERS = tuple("-".join(p) for p in itertools.permutations(("tp", "cp", "pp", "dp")))
_COUNT_RE = re.compile(r"^\s*(?P<num>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*"
                       r"(?P<prefix>[kKMGTP])?\s*$")
_PREFIX = {None: 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


def parse_count(value: object, what: str) -> float:
    """A positive count such as 2000000000000, 2e12, "2T", "8M", "1.5k" (decimal prefixes)."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a positive number such as 2T or 8M, got {value!r}")
    if isinstance(value, int | float):
        number = float(value)
    else:
        match = _COUNT_RE.match(str(value))
        if match is None:
            raise ValueError(f"{what} must be a positive number such as 2T or 8M, got "
                             f"{value!r}")
        number = float(match["num"]) * _PREFIX[match["prefix"]]
    if not number > 0 or not math.isfinite(number):
        raise ValueError(f"{what} must be positive, got {value!r}")
    return number


@dataclass
class PlanSpec:
    """What to plan for and how to search (see docs/planning.md for each field)."""

    name: str
    model: dict[str, Any]
    cluster: dict[str, Any]
    nodes: list[int]
    tokens: float
    seq_len: int
    global_batch: int  # sequences per step
    dtype: str = "bf16"
    compute: dict[str, Any] = field(default_factory=dict)
    comm: dict[str, Any] = field(default_factory=dict)
    top: int = 5
    final_top: int | None = None  # plans re-simulated with the final network; None: top
    micro_batches: tuple[int, ...] = (1, 2, 4, 8)
    zero: tuple[int, ...] = (0, 1, 3)
    recompute: tuple[str, ...] = RECOMPUTE_MODES
    schedules: tuple[str, ...] = ("1f1b", "interleaved")
    vpp: tuple[int, ...] = (2,)
    orders: tuple[str, ...] = DEFAULT_ORDERS
    uneven_pp: bool = True  # also pp not dividing the layers, with lighter end stages
    max_tp: int | None = None
    max_pp: int | None = None
    degrees: dict[str, tuple[int, ...]] = field(default_factory=dict)  # tp/pp/cp/ep lists
    cp_min_seq_len: int = 32768
    final_network: Literal["flow", "analytic"] = "flow"
    granularity: Literal["op", "layer", "stage"] = "stage"
    rank_by: str = "time"
    goodput: GoodputConfig = field(default_factory=GoodputConfig)
    # Jittered steps for the final runs (sim.variability): p50/p99 beside each final plan.
    variability: Jitter | None = None

    @property
    def final_count(self) -> int:
        """How many of the best plans get the final run (k)."""
        return self.top if self.final_top is None else self.final_top

    def scenario(self, nodes: int) -> dict[str, Any]:
        """The base scenario dict for ``nodes`` nodes (parallelism left to the search)."""
        return {
            "name": f"{self.name}-{nodes}n",
            "cluster": {**self.cluster, "nodes": nodes},
            "model": dict(self.model),
            "training": {"global_batch_size": self.global_batch, "micro_batch_size": 1,
                         "seq_len": self.seq_len, "dtype": self.dtype},
            "compute": dict(self.compute),
            "comm": dict(self.comm),
            "sim": {"granularity": self.granularity, "network": "analytic"},
        }


def _ints(value: Any, what: str) -> list[int]:
    items = value if isinstance(value, list | tuple) else [value]
    out = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int) or item < 1:
            raise ValueError(f"{what} must be a positive integer or a list of them, got "
                             f"{value!r}")
        out.append(item)
    if not out:
        raise ValueError(f"{what} must not be empty")
    return out


def _names(value: Any, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    items = value if isinstance(value, list | tuple) else [value]
    if not items or any(not isinstance(v, str) or v not in allowed for v in items):
        raise ValueError(f"{what} must list values among {', '.join(allowed)}, got {value!r}")
    return tuple(items)


_TOP_KEYS = {"name", "model", "cluster", "training", "search", "compute", "comm", "goodput",
             "variability"}
_TRAINING_KEYS = {"tokens", "seq_len", "global_batch", "global_batch_tokens", "dtype"}
DEGREE_KEYS = ("tp", "pp", "cp", "ep")
_SEARCH_KEYS = {*DEGREE_KEYS, "top", "final_top", "micro_batch", "zero", "recompute",
                "schedule", "vpp", "order", "uneven_pp", "max_tp", "max_pp",
                "cp_min_seq_len", "interleaved", "final_network", "granularity", "rank_by"}


def _batch(train: Mapping[str, Any], seq_len: int) -> int:
    if ("global_batch" in train) == ("global_batch_tokens" in train):
        raise ValueError("training needs exactly one of global_batch (sequences per step) "
                         "and global_batch_tokens (e.g. 8M)")
    if "global_batch" in train:
        return _ints(train["global_batch"], "training.global_batch")[0]
    raw = train["global_batch_tokens"]
    per_step = parse_count(raw, "training.global_batch_tokens")
    # "4M" tokens of 8,192-token sequences means 4 Mi (512 sequences), as papers count
    match = _COUNT_RE.match(str(raw))
    binary = (float(match["num"]) * 1024.0 ** "_kMGTP".index(match["prefix"].replace(
        "K", "k")) if match and match["prefix"] else per_step)
    whole = [v / seq_len for v in (per_step, binary) if (v / seq_len).is_integer()]
    if not whole:
        raise ValueError(f"training.global_batch_tokens={raw} is not a whole number of "
                         f"{seq_len}-token sequences (nor is its binary reading "
                         f"{binary:,.0f}); give global_batch in sequences instead")
    return int(whole[0])


def plan_spec(data: Mapping[str, Any], *, name: str = "plan") -> PlanSpec:
    """Validate a plan mapping (the YAML file's content); raise ValueError naming the key."""
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ValueError(f"unknown key {sorted(unknown)[0]!r}; expected: "
                         f"{', '.join(sorted(_TOP_KEYS))}")
    for section in ("model", "cluster", "training"):
        if not isinstance(data.get(section), Mapping):
            raise ValueError(f"{section}: a mapping is required (e.g. model: {{preset: "
                             f"llama3-70b}}, cluster: {{preset: dgx-h100, nodes: 128}}, "
                             f"training: {{tokens: 2T, seq_len: 8192, global_batch: 1024}})")
    cluster = dict(data["cluster"])
    nodes = _ints(cluster.pop("nodes", 1), "cluster.nodes")
    train = dict(data["training"])
    bad = set(train) - _TRAINING_KEYS
    if bad:
        raise ValueError(f"training.{sorted(bad)[0]}: unknown key; expected: "
                         f"{', '.join(sorted(_TRAINING_KEYS))}")
    if "tokens" not in train or "seq_len" not in train:
        raise ValueError("training needs tokens (total, e.g. 2T) and seq_len")
    tokens = parse_count(train["tokens"], "training.tokens")
    seq_len = _ints(train["seq_len"], "training.seq_len")[0]
    batch = _batch(train, seq_len)
    if data.get("goodput") is not None and not isinstance(data["goodput"], Mapping):
        raise ValueError("goodput: a mapping is required (e.g. goodput: {price_per_gpu_hour: "
                         "2.5})")
    spec = PlanSpec(name=str(data.get("name", name)), model=dict(data["model"]),
                    cluster=cluster, nodes=nodes, tokens=tokens, seq_len=seq_len,
                    global_batch=batch, dtype=str(train.get("dtype", "bf16")),
                    compute=dict(data.get("compute") or {}), comm=dict(data.get("comm") or {}),
                    goodput=goodput_config(data.get("goodput")))
    spec.variability = _variability(data.get("variability"))
    _search(spec, dict(data.get("search") or {}))
    if spec.rank_by == "p99" and spec.variability is None:
        raise ValueError("search.rank_by: p99 ranks the final runs by their jittered steps; "
                         "add a variability section, e.g. variability: {sigma: 0.02, "
                         "steps: 20}")
    return spec


def _variability(raw: Any) -> Jitter | None:
    """The ``variability:`` section as a Jitter (ValueError naming the key)."""
    from pydantic import ValidationError

    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError("variability: a mapping is required, e.g. variability: {sigma: 0.02, "
                         "delay_s: 0.001, link_sigma: 0.1, steps: 20, seed: 0}")
    try:
        return Jitter(**raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"variability.{where}: {first['msg']}".replace(
            "Value error, ", "")) from None


def _search(spec: PlanSpec, search: dict[str, Any]) -> None:
    """Apply the ``search:`` section to ``spec`` (ValueError naming the key)."""
    bad = set(search) - _SEARCH_KEYS
    if bad:
        raise ValueError(f"search.{sorted(bad)[0]}: unknown key; expected: "
                         f"{', '.join(sorted(_SEARCH_KEYS))}")
    if "top" in search:
        spec.top = _ints(search["top"], "search.top")[0]
    if search.get("final_top") is not None:
        spec.final_top = _ints(search["final_top"], "search.final_top")[0]
    if "micro_batch" in search:
        spec.micro_batches = tuple(_ints(search["micro_batch"], "search.micro_batch"))
    if "zero" in search:
        zero = search["zero"] if isinstance(search["zero"], list) else [search["zero"]]
        if not zero or any(z not in ZERO_STAGES or isinstance(z, bool) for z in zero):
            raise ValueError(f"search.zero must list ZeRO stages among 0, 1, 2, 3, got "
                             f"{search['zero']!r}")
        spec.zero = tuple(int(z) for z in zero)
    if "recompute" in search:
        spec.recompute = _names(search["recompute"], RECOMPUTE_MODES, "search.recompute")
    if "schedule" in search:
        spec.schedules = _names(search["schedule"], SCHEDULES, "search.schedule")
    if "interleaved" in search and not search["interleaved"]:
        spec.schedules = tuple(s for s in spec.schedules if s != "interleaved")
    if "vpp" in search:
        vpp = _ints(search["vpp"], "search.vpp")
        if 1 in vpp:
            raise ValueError(f"search.vpp lists virtual stages per rank for the interleaved "
                             f"schedule, each >= 2, got {search['vpp']!r}")
        spec.vpp = tuple(vpp)
    if "order" in search:
        given = search["order"]
        spec.orders = ALL_ORDERS if given == "all" else _names(
            given, ALL_ORDERS, "search.order (or 'all')")
    if "uneven_pp" in search:
        spec.uneven_pp = bool(search["uneven_pp"])
    for key in DEGREE_KEYS:  # restrict an axis to the listed degrees
        if key in search:
            spec.degrees[key] = tuple(_ints(search[key], f"search.{key}"))
    for key in ("max_tp", "max_pp", "cp_min_seq_len"):
        if key in search:
            setattr(spec, key, _ints(search[key], f"search.{key}")[0])
    for key, allowed in (("final_network", ("flow", "analytic")),
                         ("granularity", ("op", "layer", "stage")), ("rank_by", RANK_BY)):
        if key in search:
            if search[key] not in allowed:
                raise ValueError(f"search.{key} must be one of {', '.join(allowed)}, got "
                                 f"{search[key]!r}")
            setattr(spec, key, search[key])


def load_plan(path: str | Path) -> PlanSpec:
    """Read a plan YAML file; raise ScenarioError naming the file on any problem."""
    path = Path(path)
    try:
        data = YAML(typ="safe").load(io.StringIO(path.read_text(encoding="utf-8")))
    except OSError as exc:
        raise ScenarioError(f"cannot read plan file: {exc.strerror}", source=str(path)) from None
    except YAMLError as exc:
        raise ScenarioError(f"not valid YAML: {exc}".replace("\n", " "),
                            source=str(path)) from None
    if not isinstance(data, dict):
        raise ScenarioError("expected a mapping with model, cluster and training",
                            source=str(path))
    try:
        return plan_spec(data, name=path.stem)
    except ValueError as exc:
        raise ScenarioError(str(exc), source=str(path)) from None
