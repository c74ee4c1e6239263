"""Fuzzing the loader and ``--set``: nothing but ScenarioError may escape (issues 18, 20).

Three generators: scenario text with YAML-special tokens spliced in (tags, aliases, merge
keys, brackets, NUL, tabs, huge and non-finite numbers, units), ``--set`` assignments built
from real field names and the same tokens, and random nested values at real field paths of
a dict scenario. Each input must either load or raise the project's one-line error.
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simtrain.errors import ScenarioError
from simtrain.scenario import load_scenario

BASE = (Path(__file__).parent / "files" / "base.yaml").read_text()
BASE_DICT = {"cluster": {"preset": "dgx-a100", "nodes": 1}, "model": {"preset": "tiny-gpt"},
             "training": {"global_batch_size": 8}, "sim": {"granularity": "layer"}}
TOKENS = ["!!int", "!!float", "!!str", "!!binary", "!!set", "!!omap", "!foo", "*a", "&a",
          "<<:", "<<: *a", "[", "]", "{", "}", ":", ": ", "- ", "? ", "#", "'", '"', "%YAML",
          "---", "...", "\t", "\n", "\x00", "\x07", "\ufeff", ".inf", "-.inf", ".nan", "1e400",
          "-1", "0", "1e12", "true", "null", "~", "25MB", "1EiB", "1ZiB", "400Gbps", "2us",
          "1e400s", "nan", "inf", "é", "\\", "|", ">", "@", "`", " " * 3]
FIELDS = ["cluster", "nodes", "gpus_per_node", "nic_bandwidth", "nic_latency", "preset",
          "model", "num_layers", "hidden_size", "routing_imbalance", "training",
          "global_batch_size", "micro_batch_size", "seq_len", "parallelism", "tp", "pp", "ddp",
          "bucket_cap_mb", "overlap", "sim", "hangs", "stragglers", "delay", "slowdown",
          "fidelity", "comm", "collective_latency", "compute", "launch_overhead", "1", "3"]
ALLOWED = (ScenarioError,)
# SIMTRAIN_FUZZ_EXAMPLES=5000 for a long hunt; the test run keeps it short.
FAST = settings(max_examples=int(os.environ.get("SIMTRAIN_FUZZ_EXAMPLES", "60")), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

pieces = st.one_of(st.sampled_from(TOKENS), st.sampled_from(FIELDS),
                   st.text(max_size=6))


def _load(**kwargs: object) -> None:
    try:
        load_scenario(**kwargs)  # type: ignore[arg-type]
    except ALLOWED:
        pass


@FAST
@given(st.lists(st.tuples(st.integers(0, len(BASE)), pieces), min_size=1, max_size=6))
def test_spliced_scenario_text_loads_or_fails_cleanly(tmp_path_factory, splices) -> None:
    text = BASE
    for at, piece in sorted(splices, reverse=True):
        text = text[:at] + piece + text[at:]
    path = tmp_path_factory.mktemp("fuzz") / "s.yaml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    _load(source=path)


@FAST
@given(st.lists(st.sampled_from(FIELDS) | st.text(max_size=4), min_size=1, max_size=4),
       st.lists(pieces, max_size=5))
def test_set_assignments_load_or_fail_cleanly(tmp_path_factory, key, value) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "s.yaml"
    path.write_text(BASE)
    _load(source=path, overrides=[".".join(key) + "=" + "".join(value)])


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    | st.sampled_from(TOKENS),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=3), children, max_size=3),
    max_leaves=8)


@FAST
@given(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=3), values)
def test_random_values_at_real_fields_fail_cleanly(key, value) -> None:
    data: dict = {k: dict(v) if isinstance(v, dict) else v for k, v in BASE_DICT.items()}
    node = data
    for part in key[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[key[-1]] = value
    _load(source=data)


SWEEP = "base: files/base.yaml\naxes:\n  model.num_layers: [1, 2]\n" \
        "zip:\n  - {cluster.nodes: [1], training.global_batch_size: [8]}\n" \
        "objective: {metric: step_time_s, goal: min}\n"


@FAST
@given(st.lists(st.tuples(st.integers(0, len(SWEEP)), pieces), min_size=1, max_size=6))
def test_spliced_sweep_files_load_or_fail_cleanly(tmp_path_factory, splices) -> None:
    from simtrain.study.spec import load_sweep

    text = SWEEP
    for at, piece in sorted(splices, reverse=True):
        text = text[:at] + piece + text[at:]
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "files").mkdir()
    (folder / "files" / "base.yaml").write_text(BASE)
    path = folder / "s.yaml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        load_sweep(path).points()
    except ALLOWED:
        pass
