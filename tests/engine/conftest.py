"""Shared helpers of the engine tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import simpy

from simtrain.engine.network import FlowNetwork


def run_flow_batches(capacity: list[float], batches: list[tuple[float, list[Any]]],
                     cls: type[FlowNetwork] = FlowNetwork,
                     check: Callable[[FlowNetwork], None] | None = None
                     ) -> list[list[float] | None]:
    """Run ``batches`` ((start time, [(route, nbytes)])) on a ``cls`` network of links of
    ``capacity`` B/s; each batch's finish times. ``check(net)`` runs after every event."""
    env = simpy.Environment()
    net = cls(env, [type("L", (), {"bandwidth": c})() for c in capacity])
    out: list[list[float] | None] = [None] * len(batches)

    def starter(i: int, start: float, transfers: list[Any]) -> Any:
        yield env.timeout(start)
        finish = yield net.transfer_all(transfers)
        out[i] = list(finish)

    for i, (start, transfers) in enumerate(batches):
        env.process(starter(i, start, transfers))
    while env.peek() < float("inf"):
        env.step()
        if check is not None:
            check(net)
    return out


@pytest.fixture(scope="session")
def run_flows() -> Callable[..., list[list[float] | None]]:
    """``run_flow_batches``, for tests (session scope: hypothesis tests may take it)."""
    return run_flow_batches
