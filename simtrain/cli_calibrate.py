"""``simtrain calibrate``: fit the compute model to measured runs (registered on the main app)."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from simtrain.cli_errors import fail
from simtrain.cli_validate import SuiteDir
from simtrain.errors import ScenarioError

EPILOG = (
    "Examples:\n\n"
    "  simtrain calibrate\n\n"
    "  simtrain calibrate --suite mcore-2024-h100 --param gemm_efficiency "
    "--param attention_efficiency --jobs 2\n\n"
    "  simtrain calibrate --dir my_runs/ --suite my-cluster --write compute.yaml\n\n"
    "Fits one value per parameter and GPU architecture by least squares on log(simulated / "
    "measured step time); see docs/validation.md. Needs scipy (pip install "
    "'simtrain[calibrate]'). Exit status: 0 ok, 2 bad input, 1 anything else."
)


def calibrate(
    suite: Annotated[list[str] | None, typer.Option(
        "--suite", "-s", help="suite file name under --dir; repeat for several (default: "
                              "megatron-2020 and mcore-2024-h100)")] = None,
    directory: SuiteDir = None,
    param: Annotated[list[str] | None, typer.Option(
        "--param", "-p", help="compute parameter to fit; repeat (default: gemm_efficiency "
                              "and memory_efficiency)")] = None,
    fix: Annotated[list[str] | None, typer.Option(
        "--fix", help="hold a compute parameter at a value while fitting the others, "
                      "NAME=VALUE; repeat")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1,
                                      help="simulate rows in this many processes")] = 1,
    max_evaluations: Annotated[int, typer.Option(
        "--max-evaluations", min=2, help="cap on evaluations of each architecture's rows")] = 40,
    write: Annotated[Path | None, typer.Option(
        "--write", help="write the fitted compute: sections, per architecture, as YAML")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the fit as JSON")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress lines")] = False,
    nccl_tests: Annotated[list[Path] | None, typer.Option(
        "--nccl-tests", help="instead: fit collective latency and bus bandwidth per size "
                             "range to nccl-tests stdout logs; repeat")] = None,
) -> None:
    """Fit the compute model's per-GPU parameters to measured step times."""
    if nccl_tests:  # simtrain.ingest.nccl_fit (docs/ingest.md)
        from simtrain.cli_ingest import calibrate_nccl
        return calibrate_nccl(nccl_tests, write, as_json)
    from simtrain.calibration import DEFAULT_PARAMS, check_params, fit, observations
    from simtrain.validation import SCENARIO_SUITES, suite_path

    err = Console(stderr=True)

    names = list(dict.fromkeys(param or DEFAULT_PARAMS))
    fixed: dict[str, float] = {}
    for item in fix or []:
        name, _, value = item.partition("=")
        try:
            fixed[name.strip()] = float(value)
        except ValueError:
            raise fail(f"--fix {item!r}: expected NAME=VALUE with a number, e.g. "
                       f"memory_efficiency=0.85") from None
    try:
        check_params(names, fixed)
    except ValueError as exc:
        raise fail(str(exc)) from None
    suites = list(dict.fromkeys(suite or SCENARIO_SUITES))
    for s in suites:
        if not suite_path(s, directory).is_file():
            raise fail(f"no suite file {suite_path(s, directory)}; suites are YAML files "
                       f"with suite, flops, base and rows (see scenarios/validation/)")
    try:
        import scipy  # noqa: F401
    except ImportError:
        raise fail("simtrain calibrate needs scipy: pip install 'simtrain[calibrate]'") from None
    try:
        obs = observations(suites, directory)
    except (ScenarioError, ValueError) as exc:
        raise fail(str(exc)) from None
    show = not quiet and not as_json
    fits = fit(obs, names, fixed=fixed, jobs=jobs, max_evaluations=max_evaluations,
               progress=(lambda line: err.print(f"[dim]{line}[/]", highlight=False))
               if show else None)
    payload: dict[str, Any] = {
        "date": datetime.date.today().isoformat(), "suites": suites, "params": names,
        "fixed": fixed,
        "fits": [{"arch": f.arch, "params": f.params, "start": f.start,
                  "mape_before": f.mape("before"), "mape_after": f.mape("after"),
                  "evaluations": f.evaluations, "converged": f.converged,
                  "message": f.message, "rows": f.rows} for f in fits],
    }
    if write is not None:
        write.write_text(_yaml(payload), encoding="utf-8")
    if as_json:
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        return
    out = Console() if Console().is_terminal else Console(width=140)
    for f in payload["fits"]:
        out.print(_fit_table(f))
    if write is not None:
        out.print(f"wrote {write}")


def _yaml(payload: dict[str, Any]) -> str:
    lines = [f"# simtrain calibrate, {payload['date']}: suites {', '.join(payload['suites'])};",
             "# copy an architecture's compute: section into scenarios on that GPU."]
    for f in payload["fits"]:
        lines.append(f"{f['arch']}:  # step MAPE {f['mape_before']:.1%} -> "
                     f"{f['mape_after']:.1%} over {len(f['rows'])} rows")
        lines.append("  compute:")
        lines += [f"    {k}: {v}" for k, v in f["params"].items()]
        lines += [f"    {k}: {v}  # held fixed" for k, v in payload["fixed"].items()]
    return "\n".join(lines) + "\n"


def _fit_table(f: dict[str, Any]) -> Table:
    fitted = ", ".join(f"{k} {f['start'][k]:.4g} → {v:.4g}" for k, v in f["params"].items())
    table = Table(title=f"calibration · {f['arch']}: {fitted}",
                  caption=f"step MAPE {f['mape_before']:.1%} → {f['mape_after']:.1%}; "
                          f"{f['evaluations']} evaluations; {f['message']}")
    for column in ("suite", "row", "measured step (s)", "error before", "error after"):
        table.add_column(column, justify="left" if column in ("suite", "row") else "right")
    for r in f["rows"]:
        table.add_row(r["suite"], r["id"], f"{r['measured_step_s']:.3f}",
                      f"{r['before']:+.1%}", f"{r['after']:+.1%}")
    return table


def register(app: typer.Typer) -> None:
    """Add the command to the main app."""
    app.command("calibrate", epilog=EPILOG)(calibrate)
