"""The journal: durable per record, a torn tail from a crash is dropped, one writer."""

from __future__ import annotations

from pathlib import Path

import pytest

from simtrain.study.journal import Journal, JournalBusy


def test_records_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    with Journal(path) as j:
        assert j.records == []
        j.append([{"id": "a", "index": 0, "status": "ok"}])
        j.append([{"id": "b", "index": 1, "status": "invalid", "error": "oom"}])
    with Journal(path) as j:
        assert [r["id"] for r in j.records] == ["a", "b"]
        assert j.latest()["b"]["error"] == "oom"


def test_a_torn_last_line_is_dropped_and_truncated(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    with Journal(path) as j:
        j.append([{"id": "a", "index": 0}])
    with open(path, "a") as f:  # a crash in the middle of writing the next record
        f.write('{"id": "b", "ind')
    with Journal(path) as j:
        assert [r["id"] for r in j.records] == ["a"] and j.dropped_lines == 1
        j.append([{"id": "c", "index": 2}])
    assert path.read_text().splitlines()[-1] == '{"id": "c", "index": 2}'
    with Journal(path) as j:
        assert [r["id"] for r in j.records] == ["a", "c"] and j.dropped_lines == 0


def test_the_last_record_of_a_point_wins(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.jsonl") as j:
        j.append([{"id": "a", "status": "failed"}, {"id": "a", "status": "ok"}])
        assert j.latest() == {"a": {"id": "a", "status": "ok"}}


def test_reset_empties_the_file(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.jsonl") as j:
        j.append([{"id": "a"}])
        j.reset()
        j.append([{"id": "b"}])
    assert (tmp_path / "j.jsonl").read_text() == '{"id": "b"}\n'


def test_a_second_writer_is_refused(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.jsonl"):
        with pytest.raises(JournalBusy, match="another sweep"):
            Journal(tmp_path / "j.jsonl")
    Journal(tmp_path / "j.jsonl").close()  # free again once closed
