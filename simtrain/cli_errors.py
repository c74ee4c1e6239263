"""One-line command-line errors: every command reports bad input the same way."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: message`` to stderr; return the Exit to raise (2: bad input).

    The message is plain text: brackets in it (``simtrain[calibrate]``, ``['x']``) are shown
    as written, not read as rich markup.
    """
    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False,
                               soft_wrap=True)
    return typer.Exit(code)
