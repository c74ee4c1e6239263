"""``simtrain collective OP``: nccl-tests in simulation (registered on the main CLI app)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from simtrain.cli_errors import fail
from simtrain.comm.ops import CollectiveOp
from simtrain.units import parse_bytes

EPILOG = (
    "Examples:\n\n"
    "  simtrain collective all_reduce --cluster dgx-a100 --nodes 2\n\n"
    "  simtrain collective all_gather --cluster dgx-h100 --gpus 8 --min-bytes 1M --max-bytes 8G\n\n"
    "  simtrain collective all_reduce --scenario scenarios/ddp_buckets.yaml --json\n\n"
    "  simtrain collective all_reduce --cluster gb200-nvl72 --min-bytes 512M\n\n"
    "  simtrain collective all_reduce --cluster dgx-h100 --nodes 8 --ib-sharp -b 1G\n\n"
    "  simtrain collective all_reduce --cluster dgx-a100 --nodes 4 --algorithm tree --backend mpi"
)


def collective(
    op: Annotated[str, typer.Argument(help=f"one of: {', '.join(CollectiveOp)}")],
    cluster: Annotated[str | None, typer.Option(help="cluster preset, e.g. dgx-a100")] = None,
    nodes: Annotated[int, typer.Option(help="servers of the preset")] = 1,
    scenario: Annotated[Path | None, typer.Option(help="take the cluster and comm "
                                                       "settings from this scenario")] = None,
    gpus: Annotated[int | None, typer.Option(help="group size: ranks 0..N-1 [all]")] = None,
    min_bytes: Annotated[str, typer.Option("--min-bytes", "-b", help="smallest size")] = "8",
    max_bytes: Annotated[str, typer.Option("--max-bytes", "-e", help="largest size")] = "8G",
    factor: Annotated[int, typer.Option("--factor", "-f", help="size multiplier")] = 2,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="print nothing but errors "
                                                             "(exit status only)")] = False,
    algorithm: Annotated[str, typer.Option(help="force an algorithm [auto]")] = "auto",
    backend: Annotated[str | None, typer.Option(help="nccl, gloo, mpi or ideal")] = None,
    protocol: Annotated[str | None, typer.Option(help="auto, LL, LL128 or Simple")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print rows as JSON")] = False,
    nvls: Annotated[bool | None, typer.Option(
        "--nvls/--no-nvls", help="NVLink SHARP on or off [where the NVSwitch has it]")] = None,
    ib_sharp: Annotated[bool, typer.Option(
        "--ib-sharp", help="InfiniBand switches reduce in the network (SHARP, CollNet)")] = False,
) -> None:
    """Time one collective over message sizes, as nccl-tests does: time, algbw, busbw."""
    from simtrain.comm.config import CommConfig
    from simtrain.comm.sweep import run_sweep, sizes
    from simtrain.hardware.topology import ClusterConfig, build_cluster
    from simtrain.limits import cluster_problems
    from simtrain.scenario import load_scenario

    try:
        if op not in set(CollectiveOp):
            raise fail(f"unknown collective {op!r}; expected one of: {', '.join(CollectiveOp)}")
        if (cluster is None) == (scenario is None):
            raise fail("give exactly one of --cluster PRESET or --scenario FILE")
        if scenario is not None:
            loaded = load_scenario(scenario)
            cluster_cfg, comm_cfg = loaded.cluster, loaded.comm
        else:
            cluster_cfg, comm_cfg = ClusterConfig(preset=cluster, nodes=nodes), CommConfig()
            too_big = cluster_problems(cluster_cfg)
            if too_big:
                raise fail(f"--nodes {nodes}: {too_big[0][1]}")
        updates = {k: v for k, v in (("backend", backend), ("protocol", protocol)) if v}
        comm_cfg = CommConfig.model_validate({**comm_cfg.model_dump(), **updates})
        sharp = {k: v for k, v in (("nvlink_sharp", nvls), ("ib_sharp", ib_sharp or None))
                 if v is not None}
        if sharp:
            try:
                cluster_cfg = ClusterConfig.model_validate({**cluster_cfg.model_dump(), **sharp})
            except ValidationError as exc:  # one line: the validator's own message
                raise fail(str(exc.errors()[0]["msg"]).removeprefix("Value error, ")) from None
        built = build_cluster(cluster_cfg)
        group = gpus or built.num_gpus
        if not 2 <= group <= built.num_gpus:
            raise fail(f"--gpus {group} must be between 2 and the cluster's {built.num_gpus}")
        ranks = tuple(range(group)) if op != CollectiveOp.SEND_RECV else (0, group - 1)
        message_sizes = sizes(_size(min_bytes, "--min-bytes"), _size(max_bytes, "--max-bytes"),
                              factor)
        model = comm_cfg.build(built, built.gpu_spec.arch)
        rows = list(run_sweep(built, model, op, ranks, message_sizes, algorithm))
    except ValueError as exc:  # ScenarioError, AlgorithmError and pydantic's errors
        raise fail(" ".join(str(exc).split("\n"))) from None
    if as_json:
        sys.stdout.write(json.dumps([r.as_dict() for r in rows], indent=2) + "\n")
        return
    if quiet:
        return
    table = Table(title=f"{op} · {group} × {built.gpu_spec.name} · {model.backend.name}")
    for column in ("size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "algorithm", "protocol"):
        table.add_column(column, justify="right", no_wrap=True)
    for r in rows:
        table.add_row(f"{r.size_bytes:,}", f"{r.time_s * 1e6:,.1f}", f"{r.algbw_gbps:.2f}",
                      f"{r.busbw_gbps:.2f}", r.algorithm, r.protocol)
    Console().print(table)


def _size(text: str, option: str) -> int:
    """nccl-tests sizes: a bare K, M, G or T suffix is binary (8G = 8 GiB); "8GB" is not."""
    text = text.strip()
    if text[-1:] in ("K", "M", "G", "T") and text[:-1].replace(".", "", 1).isdigit():
        text += "iB"
    try:
        return int(parse_bytes(text))
    except ValueError as exc:
        raise ValueError(f"{option} {text!r}: {exc}") from None


def register(app: typer.Typer) -> None:
    """Add the command to the main app."""
    app.command("collective", epilog=EPILOG)(collective)
