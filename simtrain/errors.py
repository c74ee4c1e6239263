"""User-facing errors: one line naming the file, the line and the field."""

from __future__ import annotations


class ScenarioError(ValueError):
    """A scenario that cannot be simulated as written; ``str()`` is the one-line message."""

    def __init__(self, message: str, *, source: str = "<scenario>", line: int | None = None,
                 field: str | None = None) -> None:
        self.message = message
        self.source = source
        self.line = line
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        what = f"{self.field}: " if self.field else ""
        # One line, always: a newline in a --set value or a quoted input is shown as \n.
        return f"{where}: {what}{self.message}".replace("\r", "\\r").replace("\n", "\\n")
