"""The execution queue of a batch (verifier/engine.py ``verify_batch``): the order its builds are submitted in
(``build_order``) and the candidates whose builds are over, handed to the execution slots (``ReadyQueue``).

Enters: the batch's (task, candidate) items; each built candidate's index with its plan key. Leaves: the next
candidate for a slot. Imports: the standard library only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence


def build_order(items: Sequence[tuple]) -> list[int]:
    """The indices of ``items`` round-robin over their tasks, each task's own order kept: every task's first
    build is submitted before any task's second, so each task's one-off preparation (the reference's plan and
    timing, up to ~20 s on the H100) runs while later builds compile instead of at the batch's tail. An RL step
    or a generate stage hands its candidates grouped by prompt."""
    by_task: dict[str, list[int]] = {}
    for i, (task, _) in enumerate(items):
        by_task.setdefault(task.task_id, []).append(i)
    queues = list(by_task.values())
    return [q[k] for k in range(max(map(len, queues), default=0)) for q in queues if k < len(q)]


class ReadyQueue:
    """The candidates whose builds are over, for the execution slots. A slot takes the oldest candidate of a task it
    has judged before when there is one (``get(seen)``), whose plan and reference its own process (verifier/workers.py)
    holds already; else the oldest of a task whose preparation is not under way (``prepared``: its
    reference timed, or nothing to wait for). It never takes one of a task being prepared: it waits here, free to
    take the next prepared one, instead of in the slot for that task's reference timing, doing nothing while candidates
    of prepared tasks queued (on one H200's real batch, 97db09e: 405 of the 2,000 seconds the eight slots spent
    executing; 675 of 1,837 at 8b1b652 with the prepared ones first). ``poke`` (a preparation ended) wakes the
    waiting slots. A candidate put back for a run with the device's memory to itself (``put_later``: the engine's
    set-up retry) is taken only when no other candidate can be, oldest first: that run holds every other slot's next
    candidate back until it ends. None (put once per slot, when every verdict is in) ends a slot."""

    def __init__(self, plan_keys: list, prepared: Callable[[tuple], bool] = lambda key: True):
        self.plan_keys = plan_keys
        self.prepared = prepared
        self.items: list = []
        self.later: list = []
        self.cond = threading.Condition()

    def put(self, item) -> None:
        with self.cond:
            self.items.append(item)
            self.cond.notify_all()

    def put_later(self, item) -> None:
        with self.cond:
            self.later.append(item)
            self.cond.notify_all()

    def poke(self, _key=None) -> None:
        with self.cond:
            self.cond.notify_all()

    def get(self, seen: set = frozenset()):
        with self.cond:
            while True:
                for wanted in (seen.__contains__, self.prepared):
                    pick = next((k for k, item in enumerate(self.items)
                                 if item is not None and wanted(self.plan_keys[item[0]])), None)
                    if pick is not None:
                        return self.items.pop(pick)
                if self.later:
                    return self.later.pop(0)
                if None in self.items:
                    return self.items.pop(self.items.index(None))
                self.cond.wait(1.0)  # a preparation's end pokes; the timeout only bounds a missed one
