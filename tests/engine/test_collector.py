"""collection_paused: the cyclic collector is off inside and as it was on leaving."""

from __future__ import annotations

import gc

import pytest

from simtrain.engine.collector import collection_paused


def test_paused_inside_and_restored_after_error() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collection_paused():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_left_off_when_it_was_off() -> None:
    gc.disable()
    try:
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # not switched on by the pause
    finally:
        gc.enable()
