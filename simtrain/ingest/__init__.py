"""Reading what users measure: PyTorch profiler traces and nccl-tests logs."""

from __future__ import annotations


class IngestError(ValueError):
    """An input file that cannot be read as what it should be; ``str()`` is one line
    naming the file and what was expected."""

    def __init__(self, path: object, message: str) -> None:
        self.path = str(path)
        self.message = message
        super().__init__(f"{self.path}: {message}")
