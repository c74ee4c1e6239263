"""Run every case of the bad-input corpus in this process; print one JSON record per case.

Used by tests/bad_inputs/test_corpus.py in a fresh interpreter, so the memory high-water
mark (``ru_maxrss``) is the corpus's own. Each case runs ``simtrain.cli.main`` with its
arguments, stdout and stderr captured, under a SIGALRM time limit; the address space is
capped (RLIMIT_AS) so that a case that runs away fails fast instead of swapping.

    python tests/bad_inputs/runner.py OUT_DIR [KIND ...]
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TIME_LIMIT_S = 10
ADDRESS_SPACE = 8 * 2**30  # a safety net; the test checks the 2 GiB RSS target itself


class CaseTimeout(BaseException):
    """Raised by SIGALRM inside a case that runs past TIME_LIMIT_S (never caught by it)."""


def _alarm(_signum: int, _frame: Any) -> None:
    raise CaseTimeout


def cases(kinds: set[str] | None = None) -> list[tuple[str, str, int, str]]:
    """(kind, target, expected exit, fragment) from manifest.tsv."""
    out = []
    for line in (HERE / "manifest.tsv").read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        kind, target, expect, fragment = line.split("\t")
        if kinds is None or kind in kinds:
            out.append((kind, target, int(expect), fragment))
    return out


def argv(kind: str, target: str, out: Path) -> list[str]:
    """The simtrain command line of one case."""
    files = HERE / "files"
    if kind == "run":
        return ["run", str(files / target), "--no-report", "-q"]
    if kind == "set":
        assignment = target.replace("<NL>", "\n")  # a newline inside the value
        return ["run", str(files / "base.yaml"), "--no-report", "-q", "--set", assignment]
    if kind == "sweep":
        return ["sweep", str(HERE / "sweeps" / target), "--out", str(out / "sweep"),
                "--executor", "serial", "-q", "--no-report"]
    if kind == "plan":
        return ["plan", str(HERE / "plans" / target), "--executor", "serial", "-q"]
    if kind == "cli":
        return [a.replace("files/", f"{files}/") for a in shlex.split(target)]
    if kind == "big":  # a generated file (e.g. 50 MB), path given as target
        return ["run", target, "--no-report", "-q"]
    raise ValueError(f"unknown case kind {kind!r}")


def run_case(args: list[str]) -> dict[str, Any]:
    """Run ``simtrain ARGS`` in this process: exit code, output, seconds."""
    from simtrain.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    code: int | str = 0
    began = time.perf_counter()
    signal.alarm(TIME_LIMIT_S)
    old_argv = sys.argv
    try:
        sys.argv = ["simtrain", *args]
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except CaseTimeout:
        code = "timeout"
    except BaseException as exc:  # noqa: BLE001 - recorded, the test fails on it
        code = f"escaped {type(exc).__name__}: {exc}"
    finally:
        signal.alarm(0)
        sys.argv = old_argv
    return {"code": code, "stdout": stdout.getvalue(), "stderr": stderr.getvalue(),
            "seconds": time.perf_counter() - began,
            "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def main() -> None:
    out = Path(sys.argv[1])
    kinds = set(sys.argv[2:]) or None
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    signal.signal(signal.SIGALRM, _alarm)
    os.environ["COLUMNS"] = "10000"  # rich: never wrap a message
    os.chdir(out)
    big = out / "fifty_mb.yaml"  # issue 20: a 50 MB file must fail fast, not be parsed
    with big.open("w") as f:
        f.write("# padding\n" * (5 * 2**20))
    todo = [*cases(kinds), ("big", str(big), 2, "larger than 4,194,304 bytes"),
            ("big", "/dev/zero", 2, "larger than 4,194,304 bytes")]
    for kind, target, expect, fragment in todo:
        record = run_case(argv(kind, target, out))
        record.update(kind=kind, target=target, expect=expect, fragment=fragment)
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
