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
