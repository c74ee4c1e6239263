"""``simtrain import-trace``: a PyTorch profiler trace in, an efficiency table and a
measured collective table out (registered on the main app)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from simtrain.cli_errors import fail
from simtrain.ingest import IngestError
from simtrain.units import fmt_seconds

EPILOG = (
    "Examples:\n\n"
    "  simtrain import-trace rank0.pt.trace.json.gz\n\n"
    "  simtrain import-trace trace.json --step 12 --gpu h100-sxm --out tables/llama\n\n"
    "Then list tables/llama.ops.yaml under compute.tables in a scenario (docs/ingest.md). "
    "Exit status: 0 ok, 2 bad input, 1 anything else."
)
_SUFFIXES = (".json.gz", ".json", ".gz")


def default_prefix(trace: Path) -> Path:
    """``trace`` without its .json/.json.gz (and .pt.trace) suffixes."""
    name = trace.name
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return trace.with_name(name.removesuffix(".pt.trace"))


def resolve_gpu(names: list[str], given: str | None, trace: Path) -> str:
    """The catalogue GPU of a trace: ``--gpu`` or its deviceProperties name."""
    from simtrain.hardware.gpus import GPUS
    from simtrain.ingest.classify import gpu_from_device_name

    if given is not None:
        if given.lower() not in GPUS:
            raise IngestError(trace, f"--gpu {given!r} is not in the catalogue; expected one "
                              f"of {', '.join(GPUS)}")
        return given.lower()
    for name in names:
        if (gpu := gpu_from_device_name(name)) is not None:
            return gpu
    seen = f"device names {names}" if names else "no deviceProperties"
    raise IngestError(trace, f"cannot tell the GPU ({seen}); pass --gpu, one of "
                      f"{', '.join(GPUS)}")


def import_trace(
    trace: Annotated[Path, typer.Argument(help="Kineto/Chrome trace JSON (.json or .json.gz)")],
    step: Annotated[int | None, typer.Option(
        "--step", help="only kernels launched in ProfilerStep#N (default: all steps)")] = None,
    gpu: Annotated[str | None, typer.Option(
        "--gpu", help="catalogue GPU (default: from the trace's deviceProperties)")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="output prefix: writes PREFIX.ops.yaml and PREFIX.collectives.yaml "
                      "(default: the trace's path without .json)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="print nothing but errors")] = False,
) -> None:
    """Build an efficiency table and a collective table from a PyTorch profiler trace."""
    from simtrain.ingest.kineto import read_trace
    from simtrain.ingest.measure import measure, write_collectives
    from simtrain.workload.tables import write_table

    try:
        data = read_trace(trace)
        name = resolve_gpu(data.device_names, gpu, trace)
        kernels = data.step_kernels(step)
    except IngestError as exc:
        raise fail(str(exc)) from None
    result = measure(kernels, data.ops, name)
    prefix = out or default_prefix(trace)
    ops_path = prefix.with_name(prefix.name + ".ops.yaml")
    comm_path = prefix.with_name(prefix.name + ".collectives.yaml")
    source = f"simtrain import-trace {trace.name}" + (f" --step {step}" if step is not None else "")
    write_table(ops_path, result.rows, source)
    write_collectives(comm_path, result.collectives, source)
    summary: dict[str, Any] = {
        "trace": str(trace), "gpu": name, "events": data.events, "kernels": len(kernels),
        "steps": sorted(data.steps), "step": step,
        "time_by_category_s": result.time_by_category,
        "count_by_category": result.count_by_category,
        "missing_shapes": result.missing_shapes,
        "unknown_kernels": dict(sorted(result.unknown.items(), key=lambda kv: -kv[1])[:20]),
        "rows": len(result.rows), "collectives": len(result.collectives),
        "ops_table": str(ops_path), "collective_table": str(comm_path),
    }
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
        return
    if not quiet:
        _print(summary)


def _print(summary: dict[str, Any]) -> None:
    out = Console() if Console().is_terminal else Console(width=140)
    table = Table(title=f"import-trace · {summary['trace']} · {summary['gpu']}")
    for column in ("category", "kernels", "GPU time", "shapes missing"):
        table.add_column(column, justify="left" if column == "category" else "right")
    for cat, t in sorted(summary["time_by_category_s"].items(), key=lambda kv: -kv[1]):
        table.add_row(cat, str(summary["count_by_category"][cat]), fmt_seconds(t),
                      str(summary["missing_shapes"].get(cat, 0)))
    out.print(table)
    if summary["unknown_kernels"]:
        out.print("unknown kernels (not in the tables): " + "; ".join(
            f"{n[:60]} {fmt_seconds(t)}" for n, t in summary["unknown_kernels"].items()))
    out.print(f"wrote {summary['rows']} op rows to {summary['ops_table']} and "
              f"{summary['collectives']} collective rows to {summary['collective_table']}")


def calibrate_nccl(logs: list[Path], write: Path | None, as_json: bool) -> None:
    """``simtrain calibrate --nccl-tests LOG...``: fit and report each log's sweep;
    ``--write`` writes the scenario ``comm:`` block that reproduces the fits."""
    from simtrain.ingest.nccl_fit import comm_block, fit_sweep, fits_payload
    from simtrain.ingest.nccl_tests import parse_log
    from simtrain.workload.tables import atomic_write

    try:
        fits = [fit_sweep(parse_log(log)) for log in logs]
    except ValueError as exc:  # IngestError included
        raise fail(str(exc)) from None
    payload = fits_payload(fits)
    if write is not None:
        atomic_write(write, _comm_yaml(fits, comm_block(fits)))
    if as_json:
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        return
    out = Console() if Console().is_terminal else Console(width=140)
    for fit in fits:
        ranges = "; ".join(f"{s.lo / 2**20:g}-{s.hi / 2**20:g} MiB: {s.latency * 1e6:.1f} us, "
                           f"{s.busbw / 1e9:.1f} GB/s" for s in fit.segments)
        table = Table(title=f"{fit.sweep.op} · {fit.sweep.nranks} ranks on {fit.sweep.nodes} "
                            f"node(s) ({fit.level}) · {Path(fit.sweep.path).name}",
                      caption=f"alpha + S·F/busbw per size range: {ranges}; worst busbw "
                              f"error {fit.max_error():.1%}")
        for column in ("size", "measured busbw (GB/s)", "fitted busbw (GB/s)", "error",
                       "in-place error"):
            table.add_column(column, justify="right")
        index = {s: i for i, s in enumerate(fit.sweep.sizes)}
        for size, err, check in zip(fit.sizes, fit.errors, fit.check_errors, strict=True):
            measured = fit.sweep.busbw_oop[index[size]] / 1e9
            table.add_row(f"{size / 2**20:g} MiB", f"{measured:.2f}",
                          f"{measured * (1 + err):.2f}", f"{err:+.1%}", f"{check:+.1%}")
        out.print(table)
    if write is not None:
        out.print(f"wrote {write}")


def _comm_yaml(fits: list[Any], block: dict[str, Any]) -> str:
    """The ``comm:`` block as YAML, headed by one comment line per fitted sweep."""
    import io

    from ruamel.yaml import YAML

    buf = io.StringIO()
    yaml = YAML()  # round-trip dumper: keys stay in the order written
    yaml.default_flow_style = None
    yaml.width = 120
    yaml.dump(block, buf)
    head = ["# simtrain calibrate --nccl-tests: measured collective latency and bus bandwidth",
            "# per level and size range; paste this comm: block into a scenario (keys beside"
            " it stay)."]
    head += [f"# {Path(f.sweep.path).name}: {f.sweep.op}, {f.sweep.nranks} ranks on "
             f"{f.sweep.nodes} node(s), worst busbw error of the fit {f.max_error():.1%}"
             for f in fits]
    return "\n".join(head) + "\n" + buf.getvalue()


def compare_trace(
    trace: Annotated[Path, typer.Argument(help="Kineto/Chrome trace JSON (.json or .json.gz)")],
    scenario: Annotated[Path, typer.Argument(help="the scenario that models the traced run")],
    step: Annotated[int | None, typer.Option(
        "--step", help="ProfilerStep#N to compare (default: the last one in the trace)")] = None,
    rank: Annotated[int, typer.Option("--rank", help="simulated rank the trace is of")] = 0,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="override a scenario field: dotted.key=value (repeatable)")] = None,
    report: Annotated[Path, typer.Option(help="HTML page with both Gantt charts")] = Path(
        "reports/compare-trace.html"),
    no_report: Annotated[bool, typer.Option("--no-report", help="write no HTML")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the comparison as JSON")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="print nothing but errors")] = False,
) -> None:
    """Compare a measured step (profiler trace) with the simulated one."""
    from simtrain.cli_compare_trace import run_compare_trace

    run_compare_trace(trace, scenario, step=step, rank=rank, overrides=set_ or [],
                      report=None if no_report else report, as_json=as_json, quiet=quiet)


def register(app: typer.Typer) -> None:
    """Add the commands to the main app."""
    app.command("import-trace", epilog=EPILOG)(import_trace)
    app.command("compare-trace", epilog=(
        "Example:\n\n  simtrain compare-trace rank0.pt.trace.json.gz scenarios/quickstart.yaml "
        "--step 5\n\nExit status: 0 ok, 2 bad input, 1 anything else."))(compare_trace)
