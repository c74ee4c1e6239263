"""Every README snippet runs: bash and python blocks, the console examples' commands, the YAML.

Commands run in README order in one scratch folder that links the repository's
``scenarios/`` (a later snippet may use what an earlier one wrote, as a reader running them
in turn would), so reports land there. Console examples also check their printed rows:
every table row the README shows must appear in the command's output (spaces collapsed),
so the README's numbers cannot go stale. A few commands get flags appended to stay fast
(``FAST``); the snippet's own words still run first on the command line, and click takes
the last value of a repeated option.

When a change is meant to move the numbers, ``SIMTRAIN_UPDATE_README=1 python3 -m pytest
tests/test_readme.py`` rewrites each stale table row the README shows with the row the
command prints now (matched by its first cell); review the diff and commit it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simtrain.cli import app
from simtrain.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# Appended to keep the test run short (the README's command is the prefix). The planner
# keeps every flag of the snippet and gets a plan file narrowing the search to the
# README's winning family (TP4, no pipeline, ZeRO-3, one microbatch): the full search is a
# minute. The sweep runs in-process and without its report (tests/study cover both).
FAST: dict[str, list[str]] = {
    "sweep": ["--executor", "serial", "--no-report", "--quiet"],
    "plan": ["--executor", "serial", "--charts", "1"],
}
SMALL_PLAN = ("search: {max_tp: 4, max_pp: 1, zero: [3], micro_batch: [1], recompute: [none],"
              " top: 1, interleaved: false, final_network: analytic}\n")
# Not run inside the test run, each for its reason; what can be checked is checked.
NOT_RUN = {
    "python3 -m pytest": "this is the test run (.ci/run runs the README's two set-up lines "
                         "as written)",
    "mypy simtrain": "a whole-package type check (about 10 s warm, more cold) would double "
                     "this file's budget",
}
# The README's bad-input example: line 5 is the misspelt field.
BAD_YAML = ("name: bad\ncluster: {preset: dgx-a100}\nmodel:\n  preset: gpt2-small\n"
            "  hiden_size: 768\ntraining: {global_batch_size: 64, micro_batch_size: 8}\n")


@dataclass
class Snippet:
    """One command (or code block) of the README, where it is, and what it shows."""

    line: int
    lang: str
    text: str
    expected: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"L{self.line}:{self.text.splitlines()[0][:60]}"


def _blocks() -> list[tuple[int, str, list[str]]]:
    out, lines = [], README.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w+)\s*$", lines[i])
        if m:
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            out.append((i + 2, m.group(1), lines[i + 1:j]))
            i = j
        i += 1
    return out


def snippets() -> list[Snippet]:
    """Commands of bash and console blocks (one per line, ``\\`` joined, ``&&`` split);
    python and yaml blocks whole."""
    out: list[Snippet] = []
    for first, lang, body in _blocks():
        if lang in ("python", "yaml"):
            out.append(Snippet(first, lang, "\n".join(body)))
            continue
        pending, start = "", first
        for k, raw in enumerate(body):
            line = raw
            if lang == "console":
                if not line.startswith("$ "):
                    if out and out[-1].lang == "console":
                        out[-1].expected.append(line)
                    continue
                line = line[2:]
            line = re.sub(r"\s+#.*$", "", line).strip()
            if not line or line.startswith("#"):
                continue
            if not pending:
                start = first + k
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            for cmd in (pending + line).split("&&"):
                out.append(Snippet(start, lang, cmd.strip()))
            pending = ""
    return out


SNIPPETS = snippets()


def test_the_readme_has_the_snippets_we_expect():
    # A parse that finds nothing would make every test below vacuous.
    kinds = [s.lang for s in SNIPPETS]
    assert kinds.count("python") == 1 and kinds.count("yaml") == 1
    assert sum(1 for s in SNIPPETS if s.text.startswith("simtrain ")) >= 15
    assert any(s.expected for s in SNIPPETS if s.lang == "console")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp = tmp_path_factory.mktemp("readme")
    (tmp / "scenarios").symlink_to(ROOT / "scenarios")
    (tmp / "bad.yaml").write_text(BAD_YAML)
    (tmp / "small_plan.yaml").write_text(SMALL_PLAN)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)
        mp.setenv("COLUMNS", "220")  # rich tables at full width, as on a wide terminal
        yield tmp


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _run_simtrain(snippet: Snippet, scratch: Path) -> None:
    argv = shlex.split(snippet.text)[1:]
    command = argv[0]
    extra = list(FAST.get(command, []))
    if command == "plan":
        argv = ["plan", "small_plan.yaml", *argv[1:]]
    result = CliRunner().invoke(app, argv + extra)
    want_code = 2 if "bad.yaml" in argv else 0
    assert result.exit_code == want_code, f"{snippet.text}\n{result.output}"
    out = _squash(result.output)
    if os.environ.get("SIMTRAIN_UPDATE_README"):
        _update_rows(snippet, result.output)
        snippet = next(s for s in snippets() if s.line == snippet.line and s.text == snippet.text)
    for line in snippet.expected:
        shown = line.strip()
        if not shown or shown == "..." or set(shown) <= set("─━┌┐└┘┏┓┗┛┡┩╇┬┴┼│┃ "):
            continue
        if shown.startswith("error:") and shown.endswith("..."):  # the rest is elided
            shown = shown[:-3]
        assert _squash(shown) in out, (
            f"README line {snippet.line}: `{snippet.text}` no longer prints\n  {shown}\n"
            f"update the README. It printed:\n{result.output}")
    if "--json" in argv:
        json.loads(result.stdout)
    for report in re.findall(r"--report (\S+)", snippet.text):
        assert (scratch / report).is_file()
    if argv == ["run", "scenarios/quickstart.yaml"]:  # "writes ... reports/quickstart.html"
        assert (scratch / "reports/quickstart.html").is_file()


def _cells(row: str) -> list[str]:
    cells = [c.strip() for c in re.split(r"[│┃]", row)]
    return cells[1:-1] if len(cells) > 2 and cells[0] == "" else []


def _update_rows(snippet: Snippet, output: str) -> None:
    """Replace the README's shown table rows of ``snippet`` with the printed ones, matched
    by their first cell (by the first two where the first repeats, e.g. link kinds)."""
    rows = [r.rstrip() for r in output.splitlines() if _cells(r)]
    firsts = [_cells(r)[0] for r in rows]

    def key(cells: list[str]) -> tuple[str, ...]:
        return tuple(cells[:1] if firsts.count(cells[0]) == 1 else cells[:2])

    printed = {key(_cells(r)): r for r in rows}
    lines = README.read_text(encoding="utf-8").split("\n")
    start = snippet.line - 1
    for i in range(start + 1, min(start + 1 + len(snippet.expected), len(lines))):
        cells = _cells(lines[i])
        new = printed.get(key(cells)) if cells else None
        if new is not None and _squash(lines[i]) != _squash(new):
            lines[i] = new
    README.write_text("\n".join(lines), encoding="utf-8")


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: s.id)
def test_snippet_runs(snippet: Snippet, scratch: Path) -> None:
    text = snippet.text
    if snippet.lang == "python":
        exec(compile(text, f"README.md:{snippet.line}", "exec"), {"__name__": "readme"})
    elif snippet.lang == "yaml":
        # The scenario example (its hang would stop the step: loading checks every field).
        path = scratch / "example.yaml"
        path.write_text(text)
        scenario = load_scenario(path)
        assert scenario.name == "quickstart" and scenario.sim.hangs
    elif text.startswith("simtrain "):
        _run_simtrain(snippet, scratch)
    elif text in NOT_RUN:
        pytest.skip(f"`{text}` not run here: {NOT_RUN[text]}")
    elif text.startswith("python3 -m pip install -e "):
        target = shlex.split(text)[-1]
        extras = re.findall(r"\[(.*)\]", target)
        declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        assert target.startswith(".") and "simtrain" in declared.get("scripts", {})
        for extra in extras[0].split(",") if extras else []:
            assert extra in declared["optional-dependencies"], text
    elif re.match(r"python3? (tests|tools)/\S+\.py", text):  # a repository script, run
        argv = shlex.split(text)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, str(ROOT / argv[1]), *argv[2:]], cwd=scratch,
                              capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, f"{text}\n{done.stdout}{done.stderr}"
    elif text.startswith("python3 benchmarks/"):
        script = ROOT / shlex.split(text)[1]
        assert script.is_file() and "__main__" in script.read_text(), text
    elif text == "ruff check simtrain tests":
        done = subprocess.run([sys.executable, "-m", "ruff", "check", "simtrain", "tests"],
                              cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout
    else:
        pytest.fail(f"README line {snippet.line}: no way to run `{text}`; teach this test")
