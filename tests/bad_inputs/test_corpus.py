"""The bad-input corpus: every case one line naming the input, the right exit code, no
traceback, no hang, bounded memory (issues 18 and 20).

The cases live in ``manifest.tsv`` (kind, target, expected exit, a fragment the message
must contain): scenario files under ``files/``, ``--set`` assignments on ``files/base.yaml``,
sweep and plan files, raw command lines, and a 50 MB file generated at run time. They run
in one fresh interpreter (``runner.py``), in-process one after another, so the whole corpus
costs a few seconds and its memory high-water mark is its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
MAX_RSS_GIB = 2.0


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("corpus")
    env = {**os.environ, "PYTHONPATH": str(HERE.parent.parent)}
    done = subprocess.run([sys.executable, str(HERE / "runner.py"), str(out)], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_the_corpus_has_at_least_100_cases(records: list[dict]) -> None:
    kinds = {r["kind"] for r in records}
    assert len(records) >= 100 and {"run", "set", "sweep", "plan", "cli", "big"} <= kinds
    assert sum(r["kind"] == "set" for r in records) >= 40


def test_every_case_exits_as_expected_with_one_line_naming_the_input(records: list[dict]
                                                                      ) -> None:
    wrong = []
    for r in records:
        err = r["stderr"].strip()
        problems = [
            f"exit {r['code']} (expected {r['expect']})" * (r["code"] != r["expect"]),
            "traceback" * ("Traceback" in err + r["stdout"]),
            "internal error" * ("internal error" in err),
            f"{len(err.splitlines())} lines" * (len(err.splitlines()) != 1 and r["expect"] != 0),
            f"no {r['fragment']!r}" * (r["fragment"] not in err),
            "does not start with 'error: '" * (r["expect"] != 0 and not err.startswith("error: ")),
        ]
        if any(problems):
            wrong.append(f"{r['kind']} {r['target'][:80]}: {', '.join(p for p in problems if p)}"
                         f" | {err[:300]}")
    assert not wrong, "\n".join(wrong)


def test_bad_scenario_files_are_named_with_a_line(records: list[dict]) -> None:
    # A file's errors name the file; where the problem has a place in it, the line too.
    for r in records:
        if r["kind"] == "run" and r["expect"] == 2:
            assert f"files/{r['target']}" in r["stderr"], r["stderr"]
    with_line = [r for r in records if r["kind"] == "run" and r["expect"] == 2
                 and f"{r['target']}:" in r["stderr"]]
    assert len(with_line) >= 0.8 * sum(r["kind"] == "run" and r["expect"] == 2 for r in records)


def test_no_case_hangs_or_takes_long(records: list[dict]) -> None:
    slow = [(r["target"][:60], round(r["seconds"], 2)) for r in records if r["seconds"] > 5]
    assert not slow, slow  # each case is killed at 10 s; none may come near it


def test_memory_stays_under_two_gib(records: list[dict]) -> None:
    peak_gib = max(r["maxrss_kib"] for r in records) / 2**20
    assert peak_gib < MAX_RSS_GIB, f"peak RSS {peak_gib:.2f} GiB"
