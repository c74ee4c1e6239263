"""The executor's event loop: SimPy's, with events at one instant folded into one.

SimPy orders events by (time, priority, id), ids from one counter in scheduling order. Two
events at the same time and priority whose ids are consecutive run back to back: nothing
can come between them but urgent events the first one's callbacks schedule at that
instant. So scheduling an event at the time of the event scheduled just before it, with
no id drawn since, can instead add it to that event's *batch*: one heap entry whose
callback runs each member's callbacks in turn, running the urgent events a member
scheduled before the next member, exactly as the heap would have. The order of every
callback is unchanged; only heap entries (and ids) are saved. A step's members of a
tensor-parallel group make their tasks' end events one after the other at one time: one
entry instead of eight.

``Loop.run`` is SimPy's ``run()`` (no ``until``), stepping with ``step_one``.
"""

from __future__ import annotations

from heapq import heappop, heappush

import simpy
from simpy.events import NORMAL, URGENT

from simtrain.engine.contention import Clock


class _Batch:
    """Unscheduled events that fire, in order, when the batch's one heap entry does."""

    __slots__ = ("env", "members")

    def __init__(self, env: Loop, first: simpy.Event) -> None:
        self.env = env
        self.members = [first]

    def fire(self, _holder: simpy.Event) -> None:
        env = self.env
        if env._open is self:
            env._open = None  # no more members: the batch runs now
        queue = env._queue
        now = env._now
        for k, event in enumerate(self.members):
            if k:  # urgent events the previous member scheduled now run before this one
                while queue and queue[0][1] == URGENT and queue[0][0] == now:
                    env.step_one()
            callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]
            for callback in callbacks:  # type: ignore[union-attr]
                callback(event)


class Loop(Clock):
    """A Clock whose ``at`` folds events scheduled back to back at one time (see the
    module docstring) and whose ``run`` steps without a method call per event."""

    def __init__(self) -> None:
        super().__init__()
        self._open: _Batch | None = None  # the batch ``at`` may still add to
        self._open_at = -1.0  # its time
        self._open_id = -1  # the id the counter would draw next when it was last added to

    def at(self, when: float, event: simpy.Event | None = None) -> simpy.Event:
        """Trigger ``event`` (a new one by default) successfully at time ``when`` >= now."""
        assert when >= self._now, (when, self._now)
        event = event if event is not None else simpy.Event(self)
        event._ok = True
        event._value = None
        if when == self._open_at and self._open is not None and \
                self._next_id() == self._open_id:
            self._open.members.append(event)
            return event
        batch = _Batch(self, event)
        holder = simpy.Event(self)
        holder._ok = True
        holder._value = None
        holder.callbacks.append(batch.fire)  # type: ignore[union-attr]
        heappush(self._queue, (when, NORMAL, next(self._eid), holder))
        self._open, self._open_at = batch, when
        self._open_id = self._next_id()
        return event

    def _next_id(self) -> int:
        """The id the event counter will draw next, without drawing it."""
        nxt: int = self._eid.__reduce__()[1][0]  # type: ignore[attr-defined,assignment]
        return nxt

    def step_one(self) -> None:
        """Process the next event (SimPy's ``step``; the queue must not be empty)."""
        self._now, _, _, event = heappop(self._queue)
        callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]
        for callback in callbacks:  # type: ignore[union-attr]
            callback(event)
        if not event._ok and not hasattr(event, "_defused"):
            exc = type(event._value)(*event._value.args)
            exc.__cause__ = event._value
            raise exc

    def run(self, until: object = None) -> None:  # type: ignore[override]
        """Process events until none is left (``until`` is not supported)."""
        assert until is None, "Loop.run runs to the end"
        queue, step = self._queue, self.step_one
        while queue:
            step()
