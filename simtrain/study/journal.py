"""The sweep journal: an append-only JSON-lines file, the durable record of finished points.

Contract: a record is on disk (written and fsynced) before :meth:`Journal.append` returns,
so a crash at any moment, even ``kill -9``, loses no finished point. A crash in the middle
of a write can leave a torn last line; opening the journal drops it (that point simply runs
again). One record per line::

    {"id": "3f2a...", "index": 7, "status": "ok", "error": null, "values": {...},
     "summary": {...}, "elapsed_s": 0.08}

``status`` is ``ok``, ``invalid`` (the scenario cannot run as written: out of memory,
impossible plan; ``error`` says why) or ``failed`` (an unexpected exception, with its type).
Only one process may write a journal at a time (an exclusive ``flock``).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

Record = dict[str, Any]


class JournalBusy(RuntimeError):
    """Another process holds the journal (a sweep is already writing this folder)."""


class Journal:
    """Open (creating if needed) and lock the journal at ``path``; read what it holds."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        created = not self.path.exists()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise JournalBusy(f"{self.path} is being written by another sweep; wait for it "
                              "or use another --out folder") from None
        if created:
            _fsync_dir(self.path.parent)
        self.dropped_lines = 0
        self.records: list[Record] = self._read_and_repair()

    def _read_and_repair(self) -> list[Record]:
        """Parse every complete line; truncate a torn tail left by a crash mid-write."""
        with open(self.path, "rb") as f:
            data = f.read()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            os.ftruncate(self._fd, end)
            os.fsync(self._fd)
            self.dropped_lines += 1
        out: list[Record] = []
        for line in data[:end].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                self.dropped_lines += 1
                continue
            if isinstance(record, dict) and "id" in record:
                out.append(record)
        return out

    def append(self, records: Iterable[Record]) -> None:
        """Write ``records`` (one line each) and fsync; durable when this returns."""
        batch = list(records)
        data = "".join(json.dumps(r) + "\n" for r in batch)
        if not data:
            return
        view = memoryview(data.encode())
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        os.fsync(self._fd)
        self.records.extend(batch)

    def reset(self) -> None:
        """Forget every record (``--fresh``): truncate the file, under the lock."""
        os.ftruncate(self._fd, 0)
        os.fsync(self._fd)
        self.records = []

    def latest(self) -> dict[str, Record]:
        """Point id -> its record (the last one written wins)."""
        return {r["id"]: r for r in self.records}

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # releases the lock
            self._fd = -1

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
