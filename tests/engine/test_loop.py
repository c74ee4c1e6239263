"""The executor's event loop folds back-to-back events at one time without moving a callback."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.engine.contention import Clock
from simtrain.engine.loop import Loop


def test_back_to_back_events_at_one_time_share_one_heap_entry() -> None:
    env = Loop()
    log: list[str] = []
    for name in "abc":
        env.at(2.0).callbacks.append(lambda _e, n=name: log.append(n))  # type: ignore[union-attr]
    assert len(env._queue) == 1  # three events, one entry
    env.run()
    assert log == ["a", "b", "c"] and env.now == 2.0


def test_an_id_drawn_between_two_events_keeps_them_apart() -> None:
    env = Loop()
    env.at(1.0)
    env.timeout(5.0)  # draws an id: the next event at 1.0 sorts after it, not beside it
    env.at(1.0)
    assert len(env._queue) == 3


def test_an_urgent_event_a_member_schedules_runs_before_the_next_member() -> None:
    # As on SimPy's heap: (t, URGENT, id) sorts before the next member's (t, NORMAL, id).
    env = Loop()
    log: list[str] = []

    def first(_e: object) -> None:
        log.append("first")
        env.start_now(lambda _e: log.append("urgent"))

    env.at(1.0).callbacks.append(first)  # type: ignore[union-attr]
    env.at(1.0).callbacks.append(lambda _e: log.append("second"))  # type: ignore[union-attr]
    env.run()
    assert log == ["first", "urgent", "second"]


def _trace(env: Clock, seed: int, roots: int) -> list[tuple[int, float]]:
    """Run a random program: each callback logs (its id, now) and schedules 0-3 more events
    (at an absolute time, a timeout, or urgent now), every choice drawn from one stream in
    callback order, so two loops agree on the log only if they run callbacks in one order."""
    rng = random.Random(seed)
    log: list[tuple[int, float]] = []
    count = [0]

    def make() -> object:
        count[0] += 1
        me = count[0]

        def callback(_event: object) -> None:
            log.append((me, env.now))
            if count[0] > 400:
                return
            for _ in range(rng.randrange(4)):
                kind = rng.randrange(3)
                if kind == 0:
                    env.at(env.now + rng.choice((0.0, 0.0, 1.0, 2.0))).callbacks.append(make())
                elif kind == 1:
                    env.timeout(rng.choice((0.0, 1.0))).callbacks.append(make())
                else:
                    env.start_now(make())  # type: ignore[arg-type]
        return callback

    for _ in range(roots):
        env.at(rng.choice((0.0, 1.0))).callbacks.append(make())  # type: ignore[union-attr]
    env.run()
    return log


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), roots=st.integers(1, 6))
def test_the_folded_loop_runs_every_callback_in_the_order_simpy_would(seed: int,
                                                                       roots: int) -> None:
    assert _trace(Loop(), seed, roots) == _trace(Clock(), seed, roots)
