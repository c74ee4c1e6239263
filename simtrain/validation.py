"""Validation against published training runs (issue #8, first part): how far is simtrain?

Three suites, each row a published number and simtrain's prediction for the same setup:

- ``megatron-2020``: Megatron-LM's 2020 README scaling tables (DGX-2 V100 and DGX A100,
  1-8 GPUs of tensor parallelism, then 128-way data parallelism): iteration time and
  TFLOP/s per GPU (hardware FLOPs with full recompute, the 96·B·s·l·h² formula).
- ``mcore-2024-h100``: Megatron-Core's 2024 H100 weak scaling (1.7B..462B): TFLOP/s per
  GPU with Megatron-Core's model-FLOPs formula at that commit.
- ``nccl``: published all-reduce / point-to-point bus bandwidths
  (:func:`simtrain.comm.reference.calibration_table`).

The scenarios of the first two live in ``scenarios/validation/<suite>.yaml``: a ``base``
scenario and ``rows``, each with its ``published`` numbers and a ``scenario`` overlay
(deep-merged onto the base). Errors are signed, ``predicted / published - 1``; a suite's
MAPE is the mean of ``|error|`` over its compared rows (skipped rows are listed, not
averaged). The published TFLOP/s are recomputed from the *simulated step time* with each
source's own FLOP formula, so the comparison is like for like (shared/reference/README.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from simtrain.errors import ScenarioError
from simtrain.scenario import Scenario, load_scenario
from simtrain.workload.model import ModelConfig

SUITES = ("megatron-2020", "mcore-2024-h100", "nccl", "nccl-modern")
SCENARIO_SUITES = ("megatron-2020", "mcore-2024-h100")
VALIDATION_DIR = Path(__file__).resolve().parent.parent / "scenarios" / "validation"
# What a row may publish: a step time or a throughput per GPU (each source's FLOPs).
PUBLISHED_METRICS = ("iteration_time_ms", "tflops_per_gpu")
# Megatron-Core's README divides by this H100 bf16 dense peak for its MFU column.
MCORE_PEAK_TFLOPS = 989.0


# --- FLOP formulas, each as its source writes it ---------------------------------------

def megatron_2020_hardware_flops(batch: int, seq: int, layers: int, hidden: int,
                                 vocab: int) -> float:
    """Hardware FLOPs per iteration with full activation recompute (Megatron SC21 Eq. 3):
    ``96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))``; what the 2020 README's TFLOP/s count."""
    b, s, ll, h, v = batch, seq, layers, hidden, vocab
    return 96.0 * b * s * ll * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * ll * h))


def mcore_2024_model_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int, *,
                           heads: int, query_groups: int | None = None,
                           ffn_hidden: int | None = None, swiglu: bool = False,
                           experts_per_token: int = 1, kv_channels: int | None = None) -> float:
    """Megatron-Core ``num_floating_point_operations`` at commit 937571cf (model FLOPs, no
    recompute, non-causal attention), per iteration:

    ``12·B·s·l·h²·[(1 + g/a + s/h)·(q_proj/h) + (ffn/h)·topk·(3/2 if swiglu) + V/(2·l·h)]``
    with ``q_proj = kv_channels·a`` (= h for standard heads), g query groups (= a for MHA).
    For a plain GPT (MHA, ffn 4h, GELU) this is ``72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))``.
    """
    b, s, ll, h, v, a = batch, seq, layers, hidden, vocab, heads
    g = query_groups or a
    ffn = ffn_hidden or 4 * h
    q_proj = (kv_channels or h // a) * a
    gated = 1.5 if swiglu else 1.0
    return 12.0 * b * s * ll * h * h * ((1.0 + g / a + s / h) * (q_proj / h)
                                        + (ffn / h) * experts_per_token * gated
                                        + v / (2.0 * ll * h))


def formula_flops(kind: str, scenario: Scenario) -> float:
    """FLOPs per step of ``scenario`` under the suite's formula ``kind``."""
    m: ModelConfig = scenario.model
    b, s = scenario.training.global_batch_size, scenario.seq_len
    if kind == "megatron-2020-hardware":
        return megatron_2020_hardware_flops(b, s, m.num_layers, m.hidden_size, m.vocab_size)
    if kind == "mcore-2024-model":
        return mcore_2024_model_flops(
            b, s, m.num_layers, m.hidden_size, m.vocab_size, heads=m.num_heads,
            query_groups=m.kv_heads, ffn_hidden=m.expert_ffn_size if m.is_moe else m.ffn_size,
            swiglu=m.activation == "swiglu",
            experts_per_token=m.experts_per_token if m.is_moe else 1)
    raise ValueError(f"unknown FLOP formula {kind!r}; expected megatron-2020-hardware or "
                     f"mcore-2024-model")


# --- rows and summaries ----------------------------------------------------------------

@dataclass
class Row:
    """One published number and its prediction."""

    suite: str
    id: str
    metric: str
    published: float
    predicted: float | None
    error: float | None  # predicted / published - 1; None when skipped
    unit: str = ""
    note: str = ""
    skipped: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def signed_error(predicted: float, published: float) -> float:
    """``predicted / published - 1``: +10% means simtrain predicts 10% more."""
    return predicted / published - 1.0


def mape(errors: Iterable[float]) -> float:
    """Mean absolute percentage error, as a fraction (0.1 = 10%)."""
    values = [abs(e) for e in errors]
    if not values:
        raise ValueError("MAPE of no rows")
    return sum(values) / len(values)


def summarize(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """Per (suite, metric): rows compared, skipped, MAPE, mean signed error, worst row."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.suite, row.metric), []).append(row)
    out = []
    for (suite, metric), members in groups.items():
        compared = [r for r in members if r.error is not None]
        summary: dict[str, Any] = {"suite": suite, "metric": metric, "rows": len(compared),
                                   "skipped": len(members) - len(compared), "mape": None,
                                   "mean_error": None, "worst": None, "worst_error": None}
        if compared:
            errors = [r.error for r in compared if r.error is not None]
            worst = max(compared, key=lambda r: abs(r.error or 0.0))
            summary.update(mape=mape(errors), mean_error=sum(errors) / len(errors),
                           worst=worst.id, worst_error=worst.error)
        out.append(summary)
    return out


# --- suites from scenarios/validation ---------------------------------------------------

def _merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in base.items()}
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _plain(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def suite_path(suite: str, directory: Path | None = None) -> Path:
    return (directory or VALIDATION_DIR) / f"{suite}.yaml"


def load_suite(suite: str, directory: Path | None = None) -> dict[str, Any]:
    """The suite file as a dict: suite, flops, base, rows (ScenarioError if malformed)."""
    path = suite_path(suite, directory)
    try:
        data = _plain(YAML(typ="safe").load(path.read_text(encoding="utf-8")))
    except OSError as exc:
        raise ScenarioError(f"cannot read validation suite: {exc.strerror}",
                            source=str(path)) from None
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ScenarioError(f"not valid YAML: {problem}", source=str(path),
                            line=None if mark is None else mark.line + 1) from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ScenarioError("expected a mapping with suite, flops, base and rows",
                            source=str(path))
    for k, entry in enumerate(data["rows"]):
        if (not isinstance(entry, dict) or "id" not in entry
                or not isinstance(entry.get("published"), dict)):
            raise ScenarioError(f"row {k + 1} needs an id and a published mapping (e.g. "
                                f"published: {{iteration_time_ms: 1076}})", source=str(path),
                                field="rows")
        unknown = [m for m in entry["published"] if m not in PUBLISHED_METRICS]
        if unknown or not entry["published"]:
            raise ScenarioError(f"row {entry['id']}: published needs "
                                f"{' or '.join(PUBLISHED_METRICS)}, got "
                                f"{unknown or 'nothing'}", source=str(path), field="rows")
    return data


def row_bodies(suite: str, directory: Path | None = None
               ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(row entry, scenario as a plain dict: base deep-merged with the row's overlay)."""
    data = load_suite(suite, directory)
    out = []
    for entry in data["rows"]:
        body = _merge(data.get("base") or {}, entry.get("scenario") or {})
        body["name"] = f"{suite}/{entry['id']}"
        body.setdefault("description", f"validation row {entry['id']} of {suite}")
        out.append((entry, body))
    return out


def row_scenarios(suite: str, directory: Path | None = None
                  ) -> list[tuple[dict[str, Any], Scenario]]:
    """(row entry, validated scenario) for every row of a scenario suite."""
    out = []
    for entry, body in row_bodies(suite, directory):
        out.append((entry, load_row(suite, entry, body, directory)))
    return out


def load_row(suite: str, entry: dict[str, Any], body: dict[str, Any],
             directory: Path | None = None) -> Scenario:
    """The validated scenario of one row; errors name the suite file, the row and the field."""
    try:
        return load_scenario(body)
    except ScenarioError as exc:
        where = f"{exc.field}: " if exc.field else ""
        raise ScenarioError(f"row {entry['id']}: {where}{exc.message}",
                            source=str(suite_path(suite, directory))) from None


def _predict_row(suite: str, flops_kind: str, entry: dict[str, Any],
                 scenario: Scenario) -> list[Row]:
    from simtrain.simulate import simulate

    summary = simulate(scenario).summary
    step = float(summary["step_time_s"])
    gpus = int(summary["num_gpus"])
    tflops = formula_flops(flops_kind, scenario) / step / gpus / 1e12
    extra = {"step_time_s": step, "num_gpus": gpus, "fidelity": summary.get("fidelity"),
             "simtrain_mfu": summary.get("mfu"), "simtrain_hfu": summary.get("hfu"),
             "peak_memory_gib": summary.get("peak_memory_gib"),
             "ignore_memory": scenario.sim.ignore_memory}
    note = "memory check ignored" if scenario.sim.ignore_memory else ""
    predicted = {"iteration_time_ms": (step * 1e3, "ms"), "tflops_per_gpu": (tflops, "TFLOP/s")}
    rows = []
    for metric, published in entry["published"].items():
        value, unit = predicted[metric]
        rows.append(Row(suite, str(entry["id"]), metric, float(published), value,
                        signed_error(value, float(published)), unit, note, extra=extra))
    return rows


def nccl_rows() -> list[Row]:
    """The NCCL bus-bandwidth points of :mod:`simtrain.comm.reference`."""
    from simtrain.comm.reference import calibration_table

    rows = []
    for r in calibration_table():
        skipped = str(r.get("skipped") or "")
        rows.append(Row("nccl", str(r["system"]), "busbw_gbps", float(r["published_gbps"]),
                        r["predicted_gbps"], r["error"], "GB/s",
                        note=str(r.get("known_miss") or ""), skipped=skipped,
                        extra={k: r[k] for k in ("algorithm", "protocol", "source") if k in r}))
    return rows


def count_rows(suite: str, directory: Path | None = None) -> int:
    if suite == "nccl-modern":  # simtrain/comm/validation.py runs this suite
        from simtrain.comm.validation import count_points

        return count_points(suite_path(suite, directory))
    if suite == "nccl":
        from simtrain.comm.reference import POINTS

        return len(POINTS)
    return len(load_suite(suite, directory)["rows"])


def run_suite(suite: str, directory: Path | None = None,
              progress: Callable[[str], None] | None = None) -> list[Row]:
    """Predict every row of ``suite``; ``progress(row_id)`` after each simulated row."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; expected one of: {', '.join(SUITES)}")
    if suite == "nccl-modern":
        from simtrain.comm.validation import suite_rows

        return suite_rows(suite_path(suite, directory), progress)
    if suite == "nccl":
        rows = nccl_rows()
        if progress:
            for row in rows:
                progress(row.id)
        return rows
    flops_kind = str(load_suite(suite, directory)["flops"])
    out: list[Row] = []
    for entry, scenario in row_scenarios(suite, directory):
        out.extend(_predict_row(suite, flops_kind, entry, scenario))
        if progress:
            progress(str(entry["id"]))
    return out
