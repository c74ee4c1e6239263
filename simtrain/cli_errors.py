"""One-line command-line errors: every command reports bad input the same way."""

from __future__ import annotations

import typer
from rich.console import Console


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: message`` to stderr; return the Exit to raise (2: bad input)."""
    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False,
                               soft_wrap=True)
    return typer.Exit(code)
