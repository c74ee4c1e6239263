"""Stream the events of a Chrome/Kineto trace without loading the whole JSON document.

A trace is ``{"traceEvents": [ev, ev, ...], other keys...}`` or a bare ``[ev, ...]``
array, plain or gzip-compressed. ``TraceEvents`` yields one event dict at a time: it reads
the file in chunks and decodes each array element with the standard library's C decoder
(``json.JSONDecoder.raw_decode``), so memory stays at one chunk plus one event and speed
is the C scanner's; no third-party streaming parser is needed. Top-level values other
than ``traceEvents`` (``deviceProperties``, ``schemaVersion``...) land in ``meta``.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, NoReturn

from simtrain.ingest import IngestError

CHUNK = 1 << 20  # characters read per refill
_WS = " \t\n\r"
_SEPARATORS = re.compile(r"[ \t\n\r,]*")
_EXPECTED = ("expected a Chrome/Kineto trace (a JSON object with 'traceEvents', or a JSON "
             "array of events), plain or .gz")


def open_text(path: Path) -> IO[str]:
    """``path`` as UTF-8 text, gunzipped when it starts with the gzip magic bytes."""
    try:
        raw = path.open("rb")
    except OSError as exc:
        raise IngestError(path, f"cannot read: {exc.strerror}") from None
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.GzipFile(fileobj=raw), encoding="utf-8")
    return io.TextIOWrapper(raw, encoding="utf-8")


class TraceEvents:
    """Iterate the trace events of ``path``; IngestError (one line) on bad input."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.meta: dict[str, Any] = {}
        self._decoder = json.JSONDecoder()
        self._buf = ""
        self._pos = 0
        self._eof = False
        self._consumed = 0  # characters dropped from the front of the buffer

    # ---- buffer ------------------------------------------------------------------------
    def _fill(self) -> bool:
        if self._eof:
            return False
        try:
            chunk = self._fh.read(CHUNK)
        except EOFError:
            raise IngestError(self.path, "truncated gzip: the compressed stream ends before "
                              "its end marker (copy the file again)") from None
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise IngestError(self.path, f"corrupt gzip ({exc}); {_EXPECTED}") from None
        except UnicodeDecodeError:
            raise IngestError(self.path, f"not UTF-8 text; {_EXPECTED}") from None
        if not chunk:
            self._eof = True
            return False
        self._consumed += self._pos
        self._buf = self._buf[self._pos:] + chunk
        self._pos = 0
        return True

    def _peek(self) -> str:
        """The next non-space character ('' at end of file), not consumed."""
        while True:
            buf, pos = self._buf, self._pos
            while pos < len(buf) and buf[pos] in _WS:
                pos += 1
            self._pos = pos
            if pos < len(buf):
                return buf[pos]
            if not self._fill():
                return ""

    def _expect(self, char: str, what: str) -> None:
        got = self._peek()
        if got != char:
            self._fail(f"expected {char!r} {what}, got {got or 'end of file'!r}")
        self._pos += 1

    def _value(self) -> Any:
        self._peek()
        while True:
            try:
                value, end = self._decoder.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError:
                if self._fill():
                    continue
                self._fail("truncated or invalid JSON")
            # A number ending at the buffer's end may continue in the next chunk.
            if end == len(self._buf) and not self._eof and self._fill():
                continue
            self._pos = end
            return value

    def _fail(self, message: str) -> NoReturn:
        where = self._consumed + self._pos
        raise IngestError(self.path, f"{message} at character {where}; {_EXPECTED}")

    # ---- structure ---------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        with open_text(self.path) as self._fh:
            first = self._peek()
            if first == "[":
                yield from self._array()
            elif first == "{":
                yield from self._object()
            else:
                self._fail(f"starts with {first!r}" if first else "the file is empty")
            if self._peek() != "":
                self._fail("data after the end of the trace")

    def _object(self) -> Iterator[dict[str, Any]]:
        self._pos += 1
        seen_events = False
        while True:
            char = self._peek()
            if char == "}":
                self._pos += 1
                break
            if char == ",":
                self._pos += 1
                continue
            if char != '"':
                self._fail(f"expected a key, got {char or 'end of file'!r}")
            key = self._value()
            self._expect(":", f"after key {key!r}")
            if key == "traceEvents":
                if self._peek() != "[":
                    self._fail("expected traceEvents to be an array")
                seen_events = True
                yield from self._array()
            else:
                self.meta[key] = self._value()
        if not seen_events:
            raise IngestError(self.path, f"no 'traceEvents' key; {_EXPECTED}")

    def _array(self) -> Iterator[dict[str, Any]]:
        """Elements of the array whose '[' is at the cursor, decoded a buffer at a time."""
        self._pos += 1
        skip, decode = _SEPARATORS.match, self._decoder.raw_decode
        while True:
            buf, pos, n = self._buf, self._pos, len(self._buf)
            while True:
                pos = skip(buf, pos).end()  # type: ignore[union-attr]
                if pos >= n:
                    break
                if buf[pos] == "]":
                    self._pos = pos + 1
                    return
                try:
                    value, end = decode(buf, pos)
                except json.JSONDecodeError:
                    break  # cut by the chunk boundary (or invalid: decided at end of file)
                if end >= n and not self._eof:
                    break  # a number at the very end may continue in the next chunk
                pos = end
                if type(value) is dict:
                    yield value
            self._pos = pos
            if not self._fill():
                if self._pos >= len(self._buf):
                    self._fail("truncated trace: the event array is not closed")
                self._value()  # raises with the position of the invalid JSON
