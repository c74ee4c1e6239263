"""Calibration inputs: measured step times from suite rows, and their split by source.

An observation is one expressible row of a scenario suite with its measured step time:
published directly (``iteration_time_ms``) or recovered from tokens/s per GPU
(``global batch · seq / (tokens/s/GPU · GPUs)``) or TFLOP/s per GPU (the source's FLOP
formula over ``TFLOP/s · GPUs``). The split is by suite, never by row, so the held-out
error measures how the fit carries to a source it has not seen.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simtrain.errors import ScenarioError
from simtrain.validation import expressible, formula_flops
from simtrain.validation_suites import load_suite, row_bodies, suite_path


@dataclass(frozen=True)
class Observation:
    """A measured run: its scenario (as a plain dict) and measured step time."""

    suite: str
    id: str
    arch: str
    body: dict[str, Any]
    measured_step_s: float


def measured_step(entry: Mapping[str, Any], scenario: Any, flops_kind: str,
                  num_gpus: int) -> float:
    """The row's measured step time in seconds (step time, else tokens/s, else TFLOP/s)."""
    published = entry["published"]
    if "iteration_time_ms" in published:
        return float(published["iteration_time_ms"]) / 1e3
    if "tokens_per_s_per_gpu" in published:
        tokens = scenario.training.global_batch_size * scenario.seq_len
        return tokens / (float(published["tokens_per_s_per_gpu"]) * num_gpus)
    return formula_flops(flops_kind, scenario) / (
        float(published["tflops_per_gpu"]) * 1e12 * num_gpus)


def observations(suites: Sequence[str], directory: Path | None = None, *,
                 skip_unexpressible: bool = False,
                 skipped: list[str] | None = None) -> list[Observation]:
    """Every row of ``suites`` with its measured step time.

    A row simtrain cannot express is a ScenarioError naming the file and the row, unless
    ``skip_unexpressible`` (then its ``suite/id`` is appended to ``skipped``)."""
    from simtrain.hardware.topology import build_cluster

    out = []
    for suite in suites:
        if suite == "nccl":
            raise ValueError("the nccl points calibrate the network, not the compute model "
                             "(see docs/collectives.md); name a suite of training runs")
        flops_kind = str(load_suite(suite, directory).get("flops") or "")
        for entry, body in row_bodies(suite, directory):
            scenario, reason = expressible(suite, entry, body, directory)
            if scenario is None:
                if not skip_unexpressible:
                    raise ScenarioError(f"row {entry['id']}: {reason}; drop the row or pass "
                                        f"--skip-unexpressible",
                                        source=str(suite_path(suite, directory)))
                if skipped is not None:
                    skipped.append(f"{suite}/{entry['id']}")
                continue
            cluster = build_cluster(scenario.cluster)
            step = measured_step(entry, scenario, flops_kind, cluster.num_gpus)
            out.append(Observation(suite, str(entry["id"]), cluster.gpu_spec.arch, body, step))
    return out


def split(obs: Sequence[Observation], holdout: Sequence[str] | None = None
          ) -> dict[str, tuple[list[Observation], list[Observation]]]:
    """Per architecture: (training rows, held-out rows), split by suite.

    ``holdout`` names the held-out suites. By default each architecture trains on its
    suite with the most rows (ties: the first name) and holds out its other suites; an
    architecture with one suite has no held-out rows. ValueError when an architecture
    would have no training rows."""
    by_arch: dict[str, list[Observation]] = {}
    for o in obs:
        by_arch.setdefault(o.arch, []).append(o)
    out = {}
    for arch, group in by_arch.items():
        if holdout is None:
            counts: dict[str, int] = {}
            for o in group:
                counts[o.suite] = counts.get(o.suite, 0) + 1
            train_suite = min(counts, key=lambda s: (-counts[s], s))
            held_suites = set(counts) - {train_suite}
        else:
            held_suites = set(holdout)
        train = [o for o in group if o.suite not in held_suites]
        held = [o for o in group if o.suite in held_suites]
        if not train:
            raise ValueError(f"{arch}: every suite with {arch} rows is held out "
                             f"({', '.join(sorted({o.suite for o in group}))}); keep one "
                             f"for training")
        out[arch] = (train, held)
    return out


def with_params(body: Mapping[str, Any], params: Mapping[str, float]) -> dict[str, Any]:
    """``body`` with ``params`` written into its ``compute:`` section."""
    out = dict(body)
    out["compute"] = {**dict(body.get("compute") or {}), **params}
    return out


def _step(body: dict[str, Any]) -> float:
    from simtrain.scenario import load_scenario
    from simtrain.simulate import simulate

    scenario = load_scenario(body)
    if not scenario.sim.ignore_memory:  # the run did fit; time it as validate does
        scenario = scenario.model_copy(update={"sim": scenario.sim.model_copy(
            update={"ignore_memory": True})})
    return float(simulate(scenario).summary["step_time_s"])


def simulated_steps(obs: Sequence[Observation], params: Mapping[str, float],
                    pool: ProcessPoolExecutor | None = None) -> np.ndarray:
    """Simulated step time of every observation with ``params`` in its compute section."""
    bodies = [with_params(o.body, params) for o in obs]
    keys = [json.dumps({k: v for k, v in b.items() if k not in ("name", "description")},
                       sort_keys=True, default=str) for b in bodies]
    unique = list(dict.fromkeys(keys))  # rows with the same scenario are simulated once
    first = [bodies[keys.index(k)] for k in unique]
    steps = list(pool.map(_step, first)) if pool else [_step(b) for b in first]
    by_key = dict(zip(unique, steps, strict=True))
    return np.array([by_key[k] for k in keys])
