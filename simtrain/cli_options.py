"""Options shared by several ``simtrain`` commands: one definition, one help text."""

from __future__ import annotations

from typing import Annotated

import typer

SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="override a field: dotted.key=value (repeatable)"),
]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON (for scripts)")]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="print nothing but errors")]
ReportAssetsOption = Annotated[str, typer.Option(
    "--report-assets",
    help="inline: plotly.js inside the report (opens anywhere, offline); external: "
         "plotly.js written once as a file beside the report (many reports in one folder "
         "share it)")]
