"""What a plan search found: ranked plans with time-to-train, goodput and cost, the Pareto
front, and the rejected candidates summarised by reason."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from simtrain.study.goodput import Goodput, goodput
from simtrain.study.plan_candidates import Candidate, candidate_scenario
from simtrain.study.plan_spec import PlanSpec


def rejection_kind(cand: Candidate) -> str:
    """Why a candidate was turned down, in a word: memory, batch, sequence, divisibility,
    or the simulation failed."""
    if cand.status == "oom":
        return "memory"
    if cand.status == "failed":
        return "simulation failed"
    if cand.field == "training.global_batch_size":
        return "batch"
    if cand.field == "training.seq_len":
        return "sequence"
    return "divisibility"


@dataclass
class PlanResult:
    """The ranked plans, every candidate with its status, and the search's counts."""

    spec: PlanSpec
    ranked: list[Candidate]  # best first (final runs first)
    counts: dict[str, int]
    wall_s: float
    candidates: list[Candidate] = field(default_factory=list)
    stop_bound_s: float | None = None  # the first bound not simulated
    runs: dict[int, Any] = field(default_factory=dict)  # id(candidate) -> SimulationResult
    components: dict[int, dict[str, float]] = field(default_factory=dict)  # nodes -> counts
    checkpoint_bytes: float = 0.0
    check_s: float = 0.0  # time spent enumerating and checking (stage 1 and 2)
    check_cpu_s: float = 0.0  # the same in CPU time of this process

    # ---- keys --------------------------------------------------------------------------
    @staticmethod
    def step_of(cand: Candidate) -> float:
        return float((cand.summary or {})["step_time_s"])

    def rank_step(self, cand: Candidate) -> float:
        """The step the final ranking uses: the p99 of the jittered steps with ``rank_by:
        p99`` (when the run has them), else the simulated step."""
        jittered = (cand.summary or {}).get("variability")
        if self.spec.rank_by == "p99" and isinstance(jittered, dict):
            return float(jittered["p99_step_s"])
        return self.step_of(cand)

    def goodput_of(self, cand: Candidate, step_s: float, *, strict: bool = False
                   ) -> Goodput:
        """Failures and checkpoints for ``cand`` at a step of ``step_s`` seconds. A given
        checkpoint interval shorter than the step raises ValueError when ``strict``, else is
        taken as one step (for bounds)."""
        spec = self.spec
        cfg = spec.goodput
        if not strict and cfg.interval_s is not None and cfg.interval_s < step_s:
            cfg = replace(cfg, interval_s=step_s)
        ideal = spec.tokens / (spec.global_batch * spec.seq_len) * step_s
        return goodput(cfg, counts=self.components.get(cand.nodes, {}),
                       ckpt_bytes=self.checkpoint_bytes, step_s=step_s, ideal_s=ideal)

    def time_and_cost(self, cand: Candidate, step_s: float) -> tuple[float, float]:
        """Effective time-to-train (s) and cost (money with a price, else GPU-hours); both
        grow with ``step_s``, so a step-time bound bounds them."""
        g = self.goodput_of(cand, step_s)
        return g.time_to_train_s, g.cost if g.cost is not None else g.gpu_hours

    def key(self, cand: Candidate, step_s: float) -> float:
        """The ranking key at step ``step_s``: cost for ``rank_by: cost``, else time."""
        t, c = self.time_and_cost(cand, step_s)
        return c if self.spec.rank_by == "cost" else t

    def check_interval(self, cand: Candidate) -> None:
        """ValueError if the given checkpoint interval is shorter than ``cand``'s step."""
        self.goodput_of(cand, self.step_of(cand), strict=True)

    # ---- output ------------------------------------------------------------------------
    def row(self, cand: Candidate, rank: int) -> dict[str, Any]:
        """One ranked plan as plain data (JSON)."""
        summary = cand.summary or {}
        tps = float(summary.get("tokens_per_s", 0.0))
        gpus = int(summary.get("num_gpus", 0))
        ttt = self.spec.tokens / tps if tps > 0 else math.inf
        g = self.goodput_of(cand, self.step_of(cand))
        return {
            "rank": rank, "plan": cand.label, "nodes": cand.nodes, "gpus": gpus,
            "parallelism": cand.parallelism, "micro_batch_size": cand.micro_batch,
            "step_time_s": summary.get("step_time_s"),
            "search_step_time_s": summary.get("search_step_time_s",
                                              summary.get("step_time_s")),
            "bound_s": cand.bound_s, "tokens_per_s": tps, "mfu": summary.get("mfu"),
            "peak_memory_gib": summary.get("peak_memory_gib"),
            "memory_headroom_gib": cand.headroom_gib,
            "bubble_fraction": summary.get("bubble_fraction"),
            "exposed_comm_s": summary.get("exposed_comm_s"),
            "p50_step_s": (summary.get("variability") or {}).get("p50_step_s"),
            "p99_step_s": (summary.get("variability") or {}).get("p99_step_s"),
            "time_to_train_s": ttt, "time_to_train_days": ttt / 86400.0,
            "gpu_hours": gpus * ttt / 3600.0, "network": summary.get("network"),
            **g.as_dict(),
            "scenario": candidate_scenario(self.spec, cand, str(summary.get("network",
                                                                            "analytic"))),
        }

    def rows(self) -> list[dict[str, Any]]:
        return [self.row(c, i + 1) for i, c in enumerate(self.ranked)]

    def rejections(self) -> list[dict[str, Any]]:
        """Rejected candidates by reason (kind and field), most frequent first, with the
        count and one example each; for memory the example is the closest to fitting."""
        groups: dict[tuple[str, str], list[Candidate]] = {}
        for cand in self.candidates:
            if cand.status in ("invalid", "oom", "failed"):
                groups.setdefault((rejection_kind(cand), cand.field), []).append(cand)
        out = []
        for (kind, fld), cands in groups.items():
            example = min(cands, key=lambda c: c.memory_gib) if kind == "memory" else cands[0]
            out.append({"reason": kind, "field": fld, "count": len(cands),
                        "example": example.label, "message": example.reason})
        return sorted(out, key=lambda r: (-r["count"], r["reason"], r["field"]))

    def why_nothing(self) -> str:
        """One line saying why no candidate is feasible, from the closest candidates."""
        if not self.candidates:
            return "no candidates: no combination of degrees divides the cluster"
        parts = [f"{r['reason']}{'' if r['field'] == r['reason'] else ' (' + r['field'] + ')'}"
                 f": {r['count']:,}, e.g. {r['example']}: {r['message']}"
                 for r in self.rejections()[:3]]
        return (f"none of {len(self.candidates):,} candidates is feasible; "
                + "; ".join(parts))

    def as_json(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "plan": spec.name, "model": spec.model, "cluster": spec.cluster,
            "nodes": spec.nodes, "tokens": spec.tokens, "seq_len": spec.seq_len,
            "global_batch": spec.global_batch,
            "global_batch_tokens": spec.global_batch * spec.seq_len,
            "counts": self.counts, "search_wall_s": round(self.wall_s, 3),
            "check_wall_s": round(self.check_s, 3),
            "stop_bound_s": self.stop_bound_s, "final_network": spec.final_network,
            "final_top": spec.final_count, "rank_by": spec.rank_by,
            "checkpoint_bytes": self.checkpoint_bytes,
            "ranked": self.rows(), "rejected": self.rejections(),
        }


def pareto_front(result: PlanResult, cands: Sequence[Candidate]) -> list[Candidate]:
    """The plans no other plan beats in all of time-to-train, cost and memory headroom."""
    points = [(*result.time_and_cost(c, result.step_of(c)), -c.headroom_gib) for c in cands]
    front = []
    for i, p in enumerate(points):
        if not any(all(q[k] <= p[k] for k in range(3)) and q != p
                   for j, q in enumerate(points) if j != i):
            front.append(cands[i])
    return front


def fmt_duration(seconds: float) -> str:
    """A time-to-train: days above two days, else hours, minutes or seconds."""
    if not math.isfinite(seconds):
        return "never"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:,.1f} s"


HEAD = ("#", "plan", "GPUs", "search step", "final step", "p99 step", "tokens/s", "MFU",
        "memory (GiB)",
        "goodput", "time to train", "GPU-hours", "cost")


def format_rows(rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    """Ranked rows as display strings, one per column of ``HEAD``: the search's analytic
    step beside the final (flow network) step, goodput, effective time-to-train, GPU-hours
    and cost (with failures and checkpoints)."""
    from simtrain.units import fmt_seconds

    out = []
    for r in rows:
        p99 = "" if r.get("p99_step_s") is None else fmt_seconds(float(r["p99_step_s"]))
        hours = float(r["effective_gpu_hours"])
        final = float(r["step_time_s"])
        search = float(r["search_step_time_s"])
        jump = f" ({final / search - 1:+.0%})" if abs(final / search - 1) >= 0.005 else ""
        cost = "" if r["cost"] is None else _amount(float(r["cost"]))
        out.append([str(r["rank"]), r["plan"], f"{r['gpus']:,}", fmt_seconds(search),
                    fmt_seconds(final) + jump, p99, f"{r['tokens_per_s']:,.0f}",
                    f"{float(r['mfu'] or 0):.1%}", f"{float(r['peak_memory_gib'] or 0):.1f}",
                    f"{float(r['goodput']):.1%}",
                    fmt_duration(float(r["effective_time_to_train_s"])),
                    _amount(hours), cost])
    return out


def shown_columns(rows: Sequence[Sequence[str]]) -> list[int]:
    """Indexes of ``HEAD`` worth a column for these formatted rows: cost and p99 only when
    some plan has one (a price was given; the final runs were jittered)."""
    return [i for i, head in enumerate(HEAD)
            if head not in ("cost", "p99 step") or any(r[i] for r in rows)]


def _amount(value: float) -> str:
    """GPU-hours or money: whole units from 100 up, else three significant digits."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
