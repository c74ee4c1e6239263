"""YAML input read defensively: bounded size, nesting and alias expansion, lines by path.

Scenario, sweep and plan files and ``--set`` values all come through here, so every
malformed input (not UTF-8, NUL bytes, bad tags, undefined aliases, merge keys, 10,000-deep
nesting, a "billion laughs" of aliases, a 50 MB file) becomes one :class:`ScenarioError`
naming the file and line, never a library exception. The limits are far above any real
scenario (the largest bundled one has under 100 values) and low enough that a bad file
fails in milliseconds and a few MB:

- ``MAX_FILE_BYTES`` (4 MiB): ruamel's round-trip loader needs about 100 bytes of memory
  and 10 us per byte of input, so 4 MiB parse in well under a minute and 1 GiB; a custom
  topology of 10,000 links is about 1 MiB.
- ``MAX_DEPTH`` (64): scenarios nest 5 levels deep; ruamel recurses per level and a 10,000
  deep document takes seconds to overflow Python's stack.
- ``MAX_VALUES`` (250,000): scalars and containers after aliases are expanded; each
  alias reference is a copy, so 9 nested aliases of 10 make 10^9 values from 1 KiB. The
  expanded size is counted on the shared nodes first (a few ms), so a "billion laughs"
  fails before anything is copied; a custom topology of 10,000 links has about 70,000.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from simtrain.errors import ScenarioError

MAX_FILE_BYTES = 4 * 2**20
MAX_DEPTH = 64
MAX_VALUES = 250_000

YamlPath = tuple[str | int, ...]


@dataclass
class Document:
    """Plain data of a YAML file (string keys) and the 1-based line of each key by path."""

    name: str
    data: Any
    lines: dict[YamlPath, int] = field(default_factory=dict)

    def line_of(self, path: YamlPath) -> int | None:
        """Line of ``path`` or of its closest written ancestor."""
        for end in range(len(path), -1, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return None


def read_file(path: str | Path, what: str = "file", *, roundtrip: bool = True) -> Document:
    """Read and parse the YAML file at ``path``; ScenarioError on any problem (lines of
    keys are recorded in round-trip mode, the slower parser)."""
    path = Path(path)
    name = str(path)
    try:
        with path.open("rb") as f:  # read one byte past the limit: /dev/zero has no size
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ScenarioError(f"cannot read {what}: {exc.strerror or exc}", source=name) from None
    if len(raw) > MAX_FILE_BYTES:
        raise ScenarioError(f"the {what} is larger than {MAX_FILE_BYTES:,} bytes, the most "
                            "accepted (is this the right file?)", source=name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ScenarioError(f"not UTF-8 text: byte {raw[exc.start]:#04x} at offset "
                            f"{exc.start}; save the {what} as UTF-8", source=name,
                            line=line) from None
    return parse_text(text, name, roundtrip=roundtrip)


def parse_text(text: str, name: str, *, roundtrip: bool = True) -> Document:
    """Parse YAML ``text`` (``name`` labels errors); lines are recorded in round-trip mode."""
    if len(text) > MAX_FILE_BYTES:
        raise ScenarioError(f"{len(text):,} characters of YAML; at most {MAX_FILE_BYTES:,} "
                            "are accepted", source=name)
    _check_text(text, name)
    try:
        node = YAML(typ="rt" if roundtrip else "safe").load(io.StringIO(text))
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "malformed"
        raise ScenarioError(f"not valid YAML: {_one_line(problem)}", source=name,
                            line=mark.line + 1 if mark is not None else None) from None
    except RecursionError:
        raise ScenarioError(f"nested deeper than {MAX_DEPTH} levels", source=name) from None
    except (YAMLError, ValueError, LookupError, TypeError, AttributeError) as exc:
        # ruamel's constructors raise bare Python errors for malformed tags ("!!int x",
        # "!!int" as a key): all mean the same thing to the user.
        raise ScenarioError(f"not valid YAML (a malformed tag or value?): "
                            f"{_one_line(str(exc)) or type(exc).__name__}",
                            source=name) from None
    doc = Document(name, None)
    try:
        size = _expanded_size(node, {}, set(), 0, name)
        if size > MAX_VALUES:
            raise ScenarioError(f"expands to more than {MAX_VALUES:,} values ({size:,}: "
                                "aliases repeated inside aliases?)", source=name)
        doc.data = _Walker(doc).plain(node, (), 0)
    except RecursionError:
        raise ScenarioError(f"nested deeper than {MAX_DEPTH} levels", source=name) from None
    return doc


def parse_value(text: str, name: str) -> Any:
    """One YAML value (a ``--set`` right-hand side) as plain data; ScenarioError if bad.

    Errors name ``name`` without a line: the value is one line of a command.
    """
    try:
        return parse_text(text, name, roundtrip=False).data
    except ScenarioError as exc:
        raise ScenarioError(exc.message, source=name) from None


def _check_text(text: str, name: str) -> None:
    """Reject NUL bytes and flow nesting beyond MAX_DEPTH before the parser sees them."""
    nul = text.find("\x00")
    if nul >= 0:
        raise ScenarioError("contains a NUL byte (binary data?); a YAML file is text",
                            source=name, line=text.count("\n", 0, nul) + 1)
    depth = 0
    quote = ""
    line = 1
    comment = escaped = False
    prev = "\n"
    for ch in text:
        if ch == "\n":
            line += 1
            comment = False
        elif comment:
            pass
        elif quote:
            if escaped:
                escaped = False
            elif ch == "\\" and quote == '"':
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and prev in " \t\n":
            comment = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise ScenarioError(f"nested deeper than {MAX_DEPTH} levels", source=name,
                                    line=line)
        elif ch in "]}":
            depth = max(depth - 1, 0)
        prev = ch


def _expanded_size(node: Any, memo: dict[int, int], active: set[int], depth: int,
                   name: str) -> int:
    """Values in ``node`` once every alias is expanded, counting shared nodes once each
    (memo by identity); stops early past MAX_VALUES, MAX_DEPTH or at a self-reference."""
    if not isinstance(node, Mapping | list | tuple | set | frozenset):
        return 1
    key = id(node)
    if key in memo:
        return memo[key]
    if key in active:
        raise ScenarioError("an alias contains itself (a recursive structure)", source=name)
    if depth > MAX_DEPTH:
        raise ScenarioError(f"nested deeper than {MAX_DEPTH} levels", source=name)
    active.add(key)
    total = 1
    children = node.values() if isinstance(node, Mapping) else node
    for child in children:
        total += _expanded_size(child, memo, active, depth + 1, name)
        if total > MAX_VALUES:
            break
    active.discard(key)
    memo[key] = total
    return total


class _Walker:
    """ruamel nodes -> plain Python, recording lines and bounding depth and expansion."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.values = 0

    def plain(self, node: Any, path: YamlPath, depth: int) -> Any:
        self.values += 1
        if self.values > MAX_VALUES:
            raise ScenarioError(f"expands to more than {MAX_VALUES:,} values (aliases "
                                "repeated inside aliases?)", source=self.doc.name,
                                line=self.doc.line_of(path))
        if depth > MAX_DEPTH:
            raise ScenarioError(f"nested deeper than {MAX_DEPTH} levels (or an alias that "
                                "contains itself)", source=self.doc.name,
                                line=self.doc.line_of(path))
        tag = getattr(getattr(node, "tag", None), "value", None)
        if isinstance(tag, str) and not tag.startswith("tag:yaml.org,2002:"):
            raise ScenarioError(f"not valid YAML here: unknown tag {tag}; write the plain value",
                                source=self.doc.name, line=self.doc.line_of(path))
        if isinstance(node, TaggedScalar):  # !!str 3 and friends: the scalar's text
            return str(node.value)
        if isinstance(node, Mapping):
            out: dict[str, Any] = {}
            for key, value in node.items():
                child = (*path, str(key))
                line = _line(node, key, index=False)
                if line is not None:
                    self.doc.lines[child] = line
                elif path in self.doc.lines:  # a key merged in with "<<": its parent's
                    self.doc.lines[child] = self.doc.lines[path]
                out[str(key)] = self.plain(value, child, depth + 1)
            return out
        if isinstance(node, list | tuple):
            items = []
            for i, value in enumerate(node):
                line = _line(node, i, index=True)
                if line is not None:
                    self.doc.lines[(*path, i)] = line
                items.append(self.plain(value, (*path, i), depth + 1))
            return items
        if isinstance(node, str):
            return str(node)
        if isinstance(node, bool) or node is None:
            return node
        if isinstance(node, int):
            return int(node)
        if isinstance(node, float):
            return float(node)
        if isinstance(node, set | frozenset):  # !!set: keep it a plain list
            return [self.plain(v, path, depth + 1) for v in sorted(node, key=repr)]
        return str(node)  # timestamps, !!binary and other exotic tags: their text


def _line(node: Any, key: Any, *, index: bool) -> int | None:
    """1-based line of ``key`` in a round-trip node, None if unknown (merged, safe mode)."""
    if not isinstance(node, CommentedMap | CommentedSeq):
        return None
    data = getattr(node.lc, "data", None) or {}  # None for e.g. !!omap
    pos = data.get(key)
    if not pos:
        return None
    return int(pos[0]) + 1


def _one_line(text: str) -> str:
    return " ".join(str(text).split())
