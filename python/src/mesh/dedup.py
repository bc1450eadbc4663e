"""The calls of one agent replica, by task id (and call token): a copy of a request whose
task runs here shares its one run of the handler, a copy of one that ended recently gets
the same answer again, and a cancel finds the running call (docs/protocol.md, "Copies of
a request"). Pure bookkeeping: no I/O, the time comes in as an argument."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from .protocol import Call, Canceled, Outcome, Running

DEFAULT_CAPACITY = 1024
"""How many ended calls are remembered unless told otherwise."""
DEFAULT_WINDOW = 300.0
"""How long (seconds) an ended call is remembered unless told otherwise."""


@dataclass
class _Running:
    call: Call
    seq: int
    started: bool = False
    waiters: list[Call] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


@dataclass
class Run:
    """Admitted: run the handler (``seq`` names this run)."""

    seq: int


@dataclass
class Answered:
    """A copy of a call that ended: answer it with ``outcome`` at once."""

    outcome: Outcome


@dataclass
class Joined:
    """A copy of a running call: it gets the answer when the call ends (``started``: the
    handler has a slot)."""

    started: bool


Admission = Run | Answered | Joined


class Calls:
    """The table of running and recently ended calls."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, window: float = DEFAULT_WINDOW) -> None:
        self.capacity = capacity
        self.window = window
        self._running: dict[str, _Running] = {}
        self._ended: OrderedDict[str, tuple[Outcome, float]] = OrderedDict()
        self._seq = 0

    def admit(self, call: Call, now: float) -> Admission:
        """What to do with ``call``."""
        key = call.dedup_key
        running = self._running.get(key)
        if running is not None:
            same = [running.call.reply_to, *(w.reply_to for w in running.waiters)]
            if call.reply_to not in same:
                running.waiters.append(call)
            return Joined(running.started)
        ended = self._ended.get(key)
        if ended is not None and now - ended[1] <= self.window:
            return Answered(ended[0])
        self._seq += 1
        self._running[key] = _Running(call, self._seq)
        return Run(self._seq)

    def attach(self, key: str, task: asyncio.Task[None]) -> None:
        """The task running the call of ``key`` (a cancel cancels it)."""
        if key in self._running:
            self._running[key].task = task

    def started(self, key: str) -> None:
        """The call of ``key`` has a slot: its handler runs."""
        if key in self._running:
            self._running[key].started = True

    def finish(self, key: str, outcome: Outcome, now: float) -> list[Call]:
        """The call ended: remembered (unless canceled); the copies waiting for its answer."""
        running = self._running.pop(key, None)
        if not isinstance(outcome, Canceled):
            self._ended[key] = (outcome, now)
            self._ended.move_to_end(key)
            while len(self._ended) > self.capacity:
                self._ended.popitem(last=False)
        return running.waiters if running else []

    def cancel(self, task_id: str, proven_by: Callable[[str], bool]) -> bool:
        """Cancels the running call of ``task_id``: one made with a token only when
        ``proven_by(token)``. Whether one was found."""
        found = False
        for r in self._running.values():
            if r.call.task_id != task_id:
                continue
            if r.call.token is not None and not proven_by(r.call.token):
                continue
            if r.task is not None:
                r.task.cancel()
            found = True
        return found

    def known(self, task_id: str, now: float) -> Running | Outcome | None:
        """What ``tasks/get`` says of ``task_id``: not for calls made with a token."""
        r = self._running.get(task_id)
        if r is not None:
            return Running(r.started)
        ended = self._ended.get(task_id)
        if ended is not None and now - ended[1] <= self.window:
            return ended[0]
        return None

    @property
    def running(self) -> int:
        """How many calls run."""
        return len(self._running)
