"""Python's cyclic garbage collector, paused where simtrain makes millions of small
objects that reference counting alone frees (a lowering, the event loop)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collection_paused() -> Iterator[None]:
    """The cyclic collector off inside, and as it was before on leaving (also on error).

    Each collection walks every live container: in a lowering (frontier lists, (rank,
    param) keys) it cost ~1.5 of a 16k-GPU explicit step's ~4.4 CPU-s, in the event loop
    a fifth of the engine's CPU on explicit dense-512, and found nothing to free there.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
