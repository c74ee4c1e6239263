"""The streaming trace reader yields exactly what json.load reads, at any chunk size."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.ingest import IngestError, jsonstream
from simtrain.ingest.jsonstream import TraceEvents

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
_events = st.lists(st.dictionaries(st.sampled_from(["ph", "ts", "dur", "name", "args"]),
                                   st.one_of(_scalars, st.lists(_scalars, max_size=3)),
                                   max_size=5), max_size=12)


@settings(max_examples=60, deadline=None)
@given(_events, st.integers(1, 40), st.sampled_from(["", " ", "\n  "]), st.booleans())
def test_any_chunk_size_reads_the_same_events(events: list[dict[str, object]], chunk: int,
                                              space: str, bare: bool) -> None:
    body = ("," + space).join(json.dumps(e) for e in events)
    text = f"[{space}{body}{space}]" if bare else (
        f'{{"schemaVersion": 1,{space}"traceEvents": [{space}{body}{space}],'
        f'{space}"deviceProperties": [{{"name": "x"}}]}}')
    old = jsonstream.CHUNK
    jsonstream.CHUNK = chunk
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "t.json"
            path.write_text(text)
            reader = TraceEvents(path)
            doc = json.loads(text)
            assert list(reader) == (doc if bare else doc["traceEvents"])
            if not bare:
                assert reader.meta["deviceProperties"] == [{"name": "x"}]
    finally:
        jsonstream.CHUNK = old


def test_a_number_cut_at_the_chunk_boundary_is_read_whole(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [{"ts": 123456789}]}')
    # chunk 3 cuts "123456789" several times; the reader must not stop at "123"
    monkeypatch.setattr(jsonstream, "CHUNK", 3)
    assert list(TraceEvents(path)) == [{"ts": 123456789}]


@pytest.mark.parametrize(("text", "expected"), [
    ('{"traceEvents": [{"a": 1}', "truncated trace"),
    ('{"traceEvents": [{"a": 1},, {"b": }]}', "truncated or invalid JSON"),
    ('{"traceEvents": {"a": 1}}', "traceEvents to be an array"),
    ('{"traceEvents": []} extra', "data after the end"),
    ("", "the file is empty"),
])
def test_malformed_documents(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(IngestError, match=expected):
        list(TraceEvents(path))
