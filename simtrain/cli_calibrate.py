"""``simtrain calibrate``: fit the compute model to measured runs (registered on the main app)."""

from __future__ import annotations

import datetime
import json
import math
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from simtrain.cli_errors import fail
from simtrain.cli_validate import SuiteDir
from simtrain.errors import ScenarioError

# Rich markup reads [x] as a style: the extra's brackets are escaped to print as written.
EPILOG = (
    "Examples:\n\n"
    "  simtrain calibrate\n\n"
    "  simtrain calibrate --suite mcore-2024-h100 --suite mcore-moe-mixtral "
    "--param gemm_efficiency --jobs 2\n\n"
    "  simtrain calibrate --dir my_runs/ --suite my-cluster --write compute.yaml\n\n"
    "  simtrain calibrate --suite megatron-2020 --arch volta --arch ampere\n\n"
    "Fits one value per parameter and GPU architecture by least squares on log(simulated / "
    "measured step time) over a training split of suites, and reports the error on the "
    "held-out suites beside it; see docs/validation.md. Needs scipy (pip install "
    "'simtrain\\[calibrate]'). Exit status: 0 fitted, 1 fit failed (nothing written), "
    "2 bad input."
)


def calibrate(
    suite: Annotated[list[str] | None, typer.Option(
        "--suite", "-s", help="suite file name under --dir; repeat for several (default: "
                              "every suite, rows simtrain cannot express skipped)")] = None,
    directory: SuiteDir = None,
    param: Annotated[list[str] | None, typer.Option(
        "--param", "-p", help="compute parameter to fit; repeat (default: "
                              "gemm_efficiency)")] = None,
    fix: Annotated[list[str] | None, typer.Option(
        "--fix", help="hold a compute parameter at a value while fitting the others, "
                      "NAME=VALUE; repeat")] = None,
    holdout: Annotated[list[str] | None, typer.Option(
        "--holdout", help="suite held out of the fit and used to test it; repeat (default: "
                          "per GPU architecture, every suite but the one with most rows)")
    ] = None,
    skip_unexpressible: Annotated[bool | None, typer.Option(
        "--skip-unexpressible/--no-skip-unexpressible",
        help="skip rows simtrain cannot express (default: skip with no --suite, else an "
             "error)")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=0,
                                      help="simulate rows in this many processes (0: one "
                                           "per CPU)")] = 0,
    row: Annotated[list[str] | None, typer.Option(
        "--row", "-r", help="only the rows whose id matches this shell pattern (as in "
                            "validate); repeat for several")] = None,
    arch: Annotated[list[str] | None, typer.Option(
        "--arch", help="fit only these GPU architectures (volta, ampere, hopper, ...); "
                       "repeat (default: every architecture the rows run on)")] = None,
    max_evaluations: Annotated[int, typer.Option(
        "--max-evaluations", min=2, help="cap on evaluations of each architecture's "
                                         "training rows")] = 12,
    write: Annotated[Path | None, typer.Option(
        "--write", help="write the fitted compute: sections, per architecture, as YAML")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the fit as JSON")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
    nccl_tests: Annotated[list[Path] | None, typer.Option(
        "--nccl-tests", help="instead: fit collective latency and bus bandwidth per size "
                             "range to nccl-tests stdout logs; repeat")] = None,
) -> None:
    """Fit the compute model's per-GPU parameters on some suites, test them on others."""
    if nccl_tests:  # simtrain.ingest.nccl_fit (docs/ingest.md)
        from simtrain.cli_ingest import calibrate_nccl
        return calibrate_nccl(nccl_tests, write, as_json)
    from simtrain.calibration import DEFAULT_PARAMS, check_params, observations
    from simtrain.validation import row_selected, scenario_suites, suite_path

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
    suites = list(dict.fromkeys(suite or scenario_suites(directory)))
    for s in [*suites, *(holdout or [])]:
        if s == "nccl":
            continue
        if not suite_path(s, directory).is_file():
            raise fail(f"no suite file {suite_path(s, directory)}; suites are YAML files "
                       f"with suite, flops, base and rows (see scenarios/validation/)")
    unknown = [h for h in holdout or [] if h not in suites]
    if unknown:
        raise fail(f"--holdout {unknown[0]!r} is not among the suites calibrated on "
                   f"({', '.join(suites)})")
    try:
        import scipy  # noqa: F401
    except ImportError:
        raise fail("simtrain calibrate needs scipy: pip install 'simtrain[calibrate]'") from None
    skipped: list[str] = []
    try:
        obs = observations(suites, directory, skipped=skipped,
                           skip_unexpressible=suite is None if skip_unexpressible is None
                           else skip_unexpressible)
        if arch:
            obs = _of_archs(obs, arch)
        if row:
            obs = [o for o in obs if row_selected(o.id, row)]
        if not obs:
            raise ValueError(f"no expressible rows in {', '.join(suites)}"
                             + (f" match --row {' '.join(row)}" if row else ""))
        fits = _run(obs, names, fixed, holdout, jobs or os.cpu_count() or 1, max_evaluations,
                    show=not quiet and not as_json)
    except (ScenarioError, ValueError) as exc:
        raise fail(str(exc)) from None
    payload = _payload(suites, names, fixed, skipped, fits)
    failed = [f for f in fits if not f.ok]
    if write is not None and not failed:
        write.write_text(_yaml(payload), encoding="utf-8")
    if as_json:
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        out = Console() if Console().is_terminal else Console(width=150)
        for f in payload["fits"]:
            out.print(_fit_table(f))
        if write is not None and not failed:
            out.print(f"wrote {write}")
    if failed:
        problems = "; ".join(f"{f.arch}: {p}" for f in failed for p in f.problems)
        raise fail(f"fit failed, nothing written: {problems}", code=1)


def _of_archs(obs: list[Any], archs: list[str]) -> list[Any]:
    """The observations on ``archs``; ValueError naming an architecture no row runs on."""
    present = sorted({o.arch for o in obs})
    missing = [a for a in archs if a not in present]
    if missing:
        raise ValueError(f"--arch {missing[0]!r}: no row of these suites runs on it "
                         f"(architectures present: {', '.join(present)})")
    return [o for o in obs if o.arch in archs]


def _run(obs: list[Any], names: list[str], fixed: dict[str, float],
         holdout: list[str] | None, jobs: int, max_evaluations: int, *, show: bool) -> list[Any]:
    from simtrain.calibration import fit

    err = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True, disable=not show) as bar:
        tasks: dict[str, Any] = {}

        def progress(arch: str, evaluations: int, rms: float) -> None:
            if arch not in tasks:
                tasks[arch] = bar.add_task(arch, total=max_evaluations + 1)
            bar.update(tasks[arch], completed=min(evaluations, max_evaluations + 1),
                       description=f"{arch}: rms log error {rms:.3f}")

        return fit(obs, names, fixed=fixed, holdout=holdout, jobs=jobs,
                   max_evaluations=max_evaluations, progress=progress)


def _payload(suites: list[str], names: list[str], fixed: dict[str, float],
             skipped: list[str], fits: list[Any]) -> dict[str, Any]:
    return {
        "date": datetime.date.today().isoformat(), "suites": suites, "params": names,
        "fixed": fixed, "skipped_unexpressible": skipped,
        "fits": [{"arch": f.arch, "params": f.params, "sigma": f.sigma, "start": f.start,
                  "train_suites": sorted({r["suite"] for r in f.train}),
                  "held_out_suites": sorted({r["suite"] for r in f.held_out}),
                  "mape_train_before": f.mape("before"), "mape_train_after": f.mape("after"),
                  "mape_held_out_before": f.mape("before", "held_out"),
                  "mape_held_out_after": f.mape("after", "held_out"),
                  "evaluations": f.evaluations, "converged": f.converged, "ok": f.ok,
                  "problems": f.problems, "message": f.message, "train": f.train,
                  "held_out": f.held_out} for f in fits],
    }


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _pm(value: float, sigma: float) -> str:
    return f"{value:.4g} ± {sigma:.2g}" if math.isfinite(sigma) else f"{value:.4g} ± ?"


def _yaml(payload: dict[str, Any]) -> str:
    lines = [f"# simtrain calibrate, {payload['date']}: suites {', '.join(payload['suites'])};",
             "# copy an architecture's compute: section into scenarios on that GPU."]
    for f in payload["fits"]:
        lines.append(f"{f['arch']}:  # step MAPE train {_pct(f['mape_train_after'])} "
                     f"({', '.join(f['train_suites'])}), held out "
                     f"{_pct(f['mape_held_out_after'])} ({', '.join(f['held_out_suites'])})")
        lines.append("  compute:")
        lines += [f"    {k}: {v}  # ± {f['sigma'][k]:.2g} (1 sigma)"
                  for k, v in f["params"].items()]
        lines += [f"    {k}: {v}  # held fixed" for k, v in payload["fixed"].items()]
    return "\n".join(lines) + "\n"


def _fit_table(f: dict[str, Any]) -> Table:
    fitted = ", ".join(f"{k} {f['start'][k]:.4g} → {_pm(v, f['sigma'][k])}"
                       for k, v in f["params"].items())
    status = "ok" if f["ok"] else "FAILED: " + "; ".join(f["problems"])
    table = Table(title=f"calibration · {f['arch']}: {fitted}",
                  caption=f"step MAPE train {_pct(f['mape_train_before'])} → "
                          f"{_pct(f['mape_train_after'])}, held out "
                          f"{_pct(f['mape_held_out_before'])} → "
                          f"{_pct(f['mape_held_out_after'])}; {f['evaluations']} "
                          f"evaluations; {status}")
    for column in ("split", "suite", "row", "measured step (s)", "error before", "error after"):
        table.add_column(column, justify="left" if column in ("split", "suite", "row")
                         else "right")
    for which in ("train", "held_out"):
        for r in f[which]:
            table.add_row(which.replace("_", "-"), r["suite"], r["id"],
                          f"{r['measured_step_s']:.3f}", f"{r['before']:+.1%}",
                          f"{r['after']:+.1%}")
    return table


def register(app: typer.Typer) -> None:
    """Add the command to the main app."""
    app.command("calibrate", epilog=EPILOG)(calibrate)
