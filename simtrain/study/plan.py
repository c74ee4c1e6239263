"""Capacity planning: search the parallel plans of a training job, best throughput first.

``simtrain plan`` (``simtrain/cli_plan.py``) takes a model, a cluster (one node count or
several) and a training target (total tokens, global batch, sequence length) and returns the
fastest plans that fit in memory, with their time-to-train and GPU-hours.

The search has three stages:

1. **Enumerate** every combination of tp (divisors of the GPUs per node), pp (divisors of
   the layer count), cp (powers of two, only for sequences of ``cp_min_seq_len`` tokens or
   more), ep (MoE only), micro batch, ZeRO stage, recompute mode and schedule (1F1B, and
   interleaved with 2 virtual stages where the layers split), with sequence parallelism on
   whenever tp > 1 and dp the rest of the GPUs.
2. **Reject** impossible plans (``check_parallelism``) and those that do not fit in GPU
   memory (``memory_report``), without simulating either.
3. **Branch and bound**: each feasible plan gets an analytical lower bound of its step time
   (:func:`step_time_bound`); plans are simulated in increasing bound order (``sim.network:
   analytic``, ``sim.granularity: stage``, symmetric fidelity where replicas are identical)
   and the search stops once the next bound is no better than the ``top``-th best simulated
   step time: no plan left can enter the top. The top plans are then simulated again with
   the flow network (link contention) unless ``final_network`` is "analytic", and ranked by
   that step time.
"""

from __future__ import annotations

import io
import itertools
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from simtrain.errors import ScenarioError

RECOMPUTE_MODES = ("none", "selective", "full")
ZERO_STAGES = (0, 1, 2, 3)
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
    """What to plan for and how to search. ``base`` is a scenario dict without parallelism
    (cluster with one node count, model, training with seq_len and global batch)."""

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
    micro_batches: tuple[int, ...] = (1, 2, 4, 8)
    zero: tuple[int, ...] = (0, 1, 3)
    recompute: tuple[str, ...] = RECOMPUTE_MODES
    max_tp: int | None = None
    max_pp: int | None = None
    cp_min_seq_len: int = 32768
    interleaved: bool = True
    final_network: Literal["flow", "analytic"] = "flow"
    granularity: Literal["op", "layer", "stage"] = "stage"

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


_TOP_KEYS = {"name", "model", "cluster", "training", "search", "compute", "comm"}
_TRAINING_KEYS = {"tokens", "seq_len", "global_batch", "global_batch_tokens", "dtype"}
_SEARCH_KEYS = {"top", "micro_batch", "zero", "recompute", "max_tp", "max_pp",
                "cp_min_seq_len", "interleaved", "final_network", "granularity"}


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
    if ("global_batch" in train) == ("global_batch_tokens" in train):
        raise ValueError("training needs exactly one of global_batch (sequences per step) "
                         "and global_batch_tokens (e.g. 8M)")
    if "global_batch" in train:
        batch = _ints(train["global_batch"], "training.global_batch")[0]
    else:
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
        batch = int(whole[0])
    search = dict(data.get("search") or {})
    bad = set(search) - _SEARCH_KEYS
    if bad:
        raise ValueError(f"search.{sorted(bad)[0]}: unknown key; expected: "
                         f"{', '.join(sorted(_SEARCH_KEYS))}")
    spec = PlanSpec(name=str(data.get("name", name)), model=dict(data["model"]),
                    cluster=cluster, nodes=nodes, tokens=tokens, seq_len=seq_len,
                    global_batch=batch, dtype=str(train.get("dtype", "bf16")),
                    compute=dict(data.get("compute") or {}), comm=dict(data.get("comm") or {}))
    if "top" in search:
        spec.top = _ints(search["top"], "search.top")[0]
    if "micro_batch" in search:
        spec.micro_batches = tuple(_ints(search["micro_batch"], "search.micro_batch"))
    if "zero" in search:
        zero = search["zero"] if isinstance(search["zero"], list) else [search["zero"]]
        if not zero or any(z not in ZERO_STAGES or isinstance(z, bool) for z in zero):
            raise ValueError(f"search.zero must list ZeRO stages among 0, 1, 2, 3, got "
                             f"{search['zero']!r}")
        spec.zero = tuple(int(z) for z in zero)
    if "recompute" in search:
        modes = search["recompute"]
        modes = modes if isinstance(modes, list) else [modes]
        if not modes or any(m not in RECOMPUTE_MODES for m in modes):
            raise ValueError(f"search.recompute must list modes among "
                             f"{', '.join(RECOMPUTE_MODES)}, got {search['recompute']!r}")
        spec.recompute = tuple(str(m) for m in modes)
    for key in ("max_tp", "max_pp", "cp_min_seq_len"):
        if key in search:
            setattr(spec, key, _ints(search[key], f"search.{key}")[0])
    if "interleaved" in search:
        spec.interleaved = bool(search["interleaved"])
    for key, allowed in (("final_network", ("flow", "analytic")),
                         ("granularity", ("op", "layer", "stage"))):
        if key in search:
            if search[key] not in allowed:
                raise ValueError(f"search.{key} must be one of {', '.join(allowed)}, got "
                                 f"{search[key]!r}")
            setattr(spec, key, search[key])
    return spec


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


# ---- candidates ------------------------------------------------------------------------


@dataclass
class Candidate:
    """One parallel plan on one node count, and what the search learnt about it."""

    nodes: int
    parallelism: dict[str, Any]
    micro_batch: int
    status: str = "enumerated"  # invalid | oom | pruned | simulated | failed
    reason: str = ""
    memory_gib: float = 0.0
    bound_s: float = 0.0
    summary: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        p = self.parallelism
        parts = [f"TP{p['tp']}", f"PP{p['pp']}"]
        if p.get("vpp", 1) > 1:
            parts[-1] += f"x{p['vpp']}"
        if p.get("cp", 1) > 1:
            parts.append(f"CP{p['cp']}")
        if p.get("ep", 1) > 1:
            parts.append(f"EP{p['ep']}")
        parts.append(f"DP{p['dp']}")
        extra = [f"mb{self.micro_batch}", f"zero{p['zero']}", f"recompute={p['recompute']}"]
        if p["pp"] > 1:
            extra.append(p["schedule"])
        return " ".join(parts) + " · " + " ".join(extra)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _powers_of_two(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def enumerate_candidates(spec: PlanSpec, nodes: int, gpus: int, gpus_per_node: int,
                         model: Any) -> Iterable[Candidate]:
    """Every combination of degrees and options for ``gpus`` GPUs (not yet checked)."""
    tps = [t for t in _divisors(gpus_per_node) if spec.max_tp is None or t <= spec.max_tp]
    pps = [p for p in _divisors(model.num_layers) if spec.max_pp is None or p <= spec.max_pp]
    cps = _powers_of_two(16) if spec.seq_len >= spec.cp_min_seq_len else [1]
    eps = _powers_of_two(model.num_experts) if model.is_moe else [1]
    for tp, pp, cp, ep in itertools.product(tps, pps, cps, eps):
        inner = tp * pp * cp
        if gpus % inner:
            continue
        dp = gpus // inner
        if dp % ep:
            continue
        schedules: list[tuple[str, int]] = [("1f1b", 1)]
        if pp > 1 and spec.interleaved and model.num_layers % (2 * pp) == 0:
            schedules.append(("interleaved", 2))
        for (schedule, vpp), mb, zero, recompute in itertools.product(
                schedules, spec.micro_batches, spec.zero, spec.recompute):
            par = {"tp": tp, "pp": pp, "cp": cp, "dp": dp, "ep": ep, "vpp": vpp,
                   "sp": tp > 1, "zero": zero, "schedule": schedule, "recompute": recompute}
            yield Candidate(nodes, par, mb)


def candidate_scenario(spec: PlanSpec, cand: Candidate, network: str = "analytic"
                       ) -> dict[str, Any]:
    """The full scenario dict of ``cand`` (loadable with ``simtrain.load_scenario``)."""
    base = spec.scenario(cand.nodes)
    base["name"] = f"{spec.name}-{cand.nodes}n"
    base["training"]["micro_batch_size"] = cand.micro_batch
    base["parallelism"] = dict(cand.parallelism)
    base["sim"] = {**base["sim"], "network": network}
    return base


# ---- the analytical bound --------------------------------------------------------------


def stage_compute_times(scenario: Any, cluster: Any, plan: Any
                        ) -> list[list[tuple[float, float]]]:
    """(forward, backward) seconds of compute per microbatch, per stage and model chunk.

    The lowering's own accounting (``simtrain.parallel.program.stage_compute_times``: the
    sum of its task templates, recompute included), without any communication, launch
    waits or optimizer.
    """
    from simtrain.parallel.program import stage_compute_times as lowered
    from simtrain.workload.compute import op_time

    gpu, comp, dtype = cluster.gpu_spec, scenario.compute, scenario.training.dtype
    return lowered(plan.units, cp=plan.dims.cp, recompute=scenario.parallelism.recompute,
                   op_time=lambda op: op_time(op, gpu, comp, dtype))


def step_time_bound(times: Sequence[Sequence[tuple[float, float]]], micro_batches: int
                    ) -> float:
    """A lower bound of the step time (s) from per-stage compute and the pipeline fill/drain.

    Stage s cannot start before the first microbatch's forward has passed the stages
    before it (their first chunk), then runs all its m microbatches' forward and backward
    on one compute stream. With one chunk per stage (1F1B, GPipe) its last backward must
    then travel back through the stages before it: step >= Σ_{j<s} (f_j + b_j) + m·c_s,
    which for equal stages is the familiar (m + p - 1)·c. With virtual stages only the fill
    is counted. Communication, launch waits and the optimizer count as zero, so a plan
    whose bound exceeds a simulated step time cannot beat it.
    """
    best = 0.0
    single = all(len(chunks) == 1 for chunks in times)
    fill = drain = 0.0
    for chunks in times:
        work = micro_batches * sum(f + b for f, b in chunks)
        best = max(best, fill + work + (drain if single else 0.0))
        fill += chunks[0][0]
        drain += chunks[0][1]
    return best


# ---- the search ------------------------------------------------------------------------


@dataclass
class PlanResult:
    """The ranked plans and the search's counts."""

    spec: PlanSpec
    ranked: list[Candidate]  # the top plans, best first (final network)
    counts: dict[str, int]
    wall_s: float
    candidates: list[Candidate] = field(default_factory=list)
    stop_bound_s: float | None = None  # the first bound not simulated
    runs: dict[int, Any] = field(default_factory=dict)  # id(candidate) -> SimulationResult

    def row(self, cand: Candidate, rank: int) -> dict[str, Any]:
        """One ranked plan as plain data (JSON)."""
        summary = cand.summary or {}
        tps = float(summary.get("tokens_per_s", 0.0))
        gpus = int(summary.get("num_gpus", 0))
        ttt = self.spec.tokens / tps if tps > 0 else math.inf
        return {
            "rank": rank, "plan": cand.label, "nodes": cand.nodes, "gpus": gpus,
            "parallelism": cand.parallelism, "micro_batch_size": cand.micro_batch,
            "step_time_s": summary.get("step_time_s"),
            "search_step_time_s": summary.get("search_step_time_s"),
            "bound_s": cand.bound_s, "tokens_per_s": tps, "mfu": summary.get("mfu"),
            "peak_memory_gib": summary.get("peak_memory_gib"),
            "bubble_fraction": summary.get("bubble_fraction"),
            "exposed_comm_s": summary.get("exposed_comm_s"),
            "time_to_train_s": ttt, "time_to_train_days": ttt / 86400.0,
            "gpu_hours": gpus * ttt / 3600.0, "network": summary.get("network"),
            "scenario": candidate_scenario(self.spec, cand, str(summary.get("network",
                                                                            "analytic"))),
        }

    def rows(self) -> list[dict[str, Any]]:
        return [self.row(c, i + 1) for i, c in enumerate(self.ranked)]

    def as_json(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "plan": spec.name, "model": spec.model, "cluster": spec.cluster,
            "nodes": spec.nodes, "tokens": spec.tokens, "seq_len": spec.seq_len,
            "global_batch": spec.global_batch,
            "global_batch_tokens": spec.global_batch * spec.seq_len,
            "counts": self.counts, "search_wall_s": round(self.wall_s, 3),
            "stop_bound_s": self.stop_bound_s, "final_network": spec.final_network,
            "ranked": self.rows(),
        }


Progress = Callable[[str, int, int], None]  # (phase, done, total)


def simulate_candidate(scenario: dict[str, Any]) -> dict[str, Any]:
    """Simulate one candidate scenario dict; {"summary": ...} or {"error": ...}."""
    import json

    from simtrain.engine.sim import SimulationDeadlock
    from simtrain.scenario import load_scenario
    from simtrain.simulate import simulate

    try:
        result = simulate(load_scenario(scenario))
    except (ScenarioError, SimulationDeadlock) as exc:
        return {"error": str(exc).replace("\n", " ")}
    except Exception as exc:  # noqa: BLE001 - one candidate must not end the search
        return {"error": f"{type(exc).__name__}: {exc}".replace("\n", " ")}
    return {"summary": json.loads(json.dumps(result.summary, default=str))}


def _check(spec: PlanSpec, cand: Candidate, base: Any, cluster: Any, per_node: int) -> None:
    """Stage 1 for one candidate: invalid, oom, or feasible with its bound."""
    from pydantic import ValidationError

    from simtrain.parallel.plan import ParallelismConfig, check_parallelism
    from simtrain.simulate import build_plan, memory_report

    try:
        par = ParallelismConfig(**cand.parallelism)
    except ValidationError as exc:
        cand.status, cand.reason = "invalid", str(exc.errors()[0]["msg"])
        return
    problems = check_parallelism(par, base.model, num_gpus=cluster.num_gpus,
                                 gpus_per_node=per_node, global_batch=spec.global_batch,
                                 micro_batch=cand.micro_batch, seq_len=spec.seq_len)
    if problems:
        cand.status, cand.reason = "invalid", f"{problems[0][0]}: {problems[0][1]}"
        return
    train = base.training.model_copy(update={"micro_batch_size": cand.micro_batch})
    scenario = base.model_copy(update={"parallelism": par, "training": train})
    try:
        plan = build_plan(scenario, cluster)
        memory = memory_report(scenario, cluster, plan)
    except (ValueError, ScenarioError) as exc:
        cand.status, cand.reason = "invalid", str(exc)
        return
    cand.memory_gib = memory.total / 2**30
    if not memory.fits():
        cand.status, cand.reason = "oom", memory.describe()
        return
    cand.status = "feasible"
    cand.bound_s = step_time_bound(stage_compute_times(scenario, cluster, plan),
                                   plan.micro_batches)


def search(spec: PlanSpec, *, executor: Any = None, progress: Progress | None = None,
           batch: int | None = None, keep: int = 0) -> PlanResult:
    """Run the three stages (see the module docstring); return the ranked top plans.

    ``executor`` (a :mod:`simtrain.study.executors` executor; default: this process) runs
    the simulations, ``batch`` at a time (default: its worker count). ``progress(phase,
    done, total)`` is called as candidates are checked ("check") and simulated ("simulate";
    the total is the feasible count, an upper bound) and for the final runs ("final").
    The final runs of the first ``keep`` top plans are kept (``PlanResult.runs``, with
    their timelines) for the report. Raises ScenarioError when the base scenario is bad
    (unknown preset, ...).
    """
    from simtrain.hardware.topology import build_cluster
    from simtrain.scenario import load_scenario

    t0 = time.perf_counter()
    candidates: list[Candidate] = []
    for nodes in spec.nodes:
        try:
            base = load_scenario(spec.scenario(nodes))
        except ScenarioError as exc:
            raise ScenarioError(exc.message, source=spec.name, field=exc.field) from None
        cluster = build_cluster(base.cluster)
        per_node = sum(1 for r in range(cluster.num_gpus) if cluster.server_of(r) == 0)
        found = list(enumerate_candidates(spec, nodes, cluster.num_gpus, per_node,
                                          base.model))
        total = len(candidates) + len(found)
        for i, cand in enumerate(found):
            _check(spec, cand, base, cluster, per_node)
            if progress is not None and (i % 64 == 0 or i == len(found) - 1):
                progress("check", len(candidates) + i + 1, total)
        candidates.extend(found)
    feasible = sorted((c for c in candidates if c.status == "feasible"),
                      key=lambda c: c.bound_s)
    if executor is None:
        from simtrain.study.executors import SerialExecutor

        executor = SerialExecutor()
    size = batch or max(1, executor.workers)
    top = spec.top
    best: list[float] = []  # simulated step times, sorted
    stop: float | None = None
    done = 0
    i = 0
    while i < len(feasible):
        threshold = best[top - 1] if len(best) >= top else math.inf
        if feasible[i].bound_s >= threshold:
            stop = feasible[i].bound_s
            break
        chunk = [c for c in feasible[i:i + size] if c.bound_s < threshold]
        i += size
        args = [(candidate_scenario(spec, c),) for c in chunk]
        by_index = dict(enumerate(chunk))
        outcomes = executor.imap_unordered(_indexed, [(j, *a) for j, a in enumerate(args)])
        for j, outcome in outcomes:
            cand = by_index[j]
            if "summary" in outcome:
                cand.status, cand.summary = "simulated", outcome["summary"]
                best.append(float(outcome["summary"]["step_time_s"]))
                best.sort()
            else:
                cand.status, cand.reason = "failed", outcome["error"]
            done += 1
            if progress is not None:
                progress("simulate", done, len(feasible))
    if progress is not None and feasible:
        progress("simulate", done, done)  # the rest is pruned: the bar ends full
    for cand in feasible:
        if cand.status == "feasible":
            cand.status = "pruned"
    simulated = sorted((c for c in feasible if c.status == "simulated"),
                       key=lambda c: float((c.summary or {})["step_time_s"]))
    ranked = simulated[:top]
    runs: dict[int, Any] = {}
    if spec.final_network != "analytic":
        import json

        from simtrain.scenario import load_scenario
        from simtrain.simulate import simulate

        for n, cand in enumerate(ranked):
            run = simulate(load_scenario(candidate_scenario(spec, cand, spec.final_network)))
            search_step = (cand.summary or {}).get("step_time_s")
            summary = json.loads(json.dumps(run.summary, default=str))
            cand.summary = {**summary, "search_step_time_s": search_step}
            if n < keep:
                runs[id(cand)] = run
            if progress is not None:
                progress("final", n + 1, len(ranked))
        ranked.sort(key=lambda c: float((c.summary or {})["step_time_s"]))
    counts = {"enumerated": len(candidates)}
    for status in ("invalid", "oom", "pruned", "simulated", "failed"):
        counts[status] = sum(1 for c in candidates if c.status == status)
    counts["feasible"] = len(feasible)
    return PlanResult(spec, ranked, counts, time.perf_counter() - t0, candidates, stop, runs)


def _indexed(index: int, scenario: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return index, simulate_candidate(scenario)


def simulate_ranked(result: PlanResult, count: int | None = None) -> list[Any]:
    """SimulationResults (with timelines) of the top ``count`` plans, for the report."""
    from simtrain.scenario import load_scenario
    from simtrain.simulate import simulate

    out = []
    for cand in result.ranked[:count]:
        if id(cand) in result.runs:
            out.append(result.runs[id(cand)])
            continue
        network = str((cand.summary or {}).get("network", "analytic"))
        out.append(simulate(load_scenario(candidate_scenario(result.spec, cand, network))))
    return out


def fmt_duration(seconds: float) -> str:
    """A time-to-train: days above two days, else hours, minutes or seconds."""
    if not math.isfinite(seconds):
        return "never"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:,.1f} s"


def format_rows(rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    """Ranked rows as display strings (rank, plan, GPUs, step, tokens/s, MFU, memory,
    time-to-train, GPU-hours)."""
    from simtrain.units import fmt_seconds

    out = []
    for r in rows:
        hours = float(r["gpu_hours"])
        out.append([str(r["rank"]), r["plan"], f"{r['gpus']:,}",
                    fmt_seconds(float(r["step_time_s"])), f"{r['tokens_per_s']:,.0f}",
                    f"{float(r['mfu'] or 0):.1%}", f"{float(r['peak_memory_gib'] or 0):.1f}",
                    fmt_duration(float(r["time_to_train_s"])),
                    f"{hours:,.0f}" if hours >= 100 else f"{hours:.3g}"])
    return out
