"""Memory admission: execution jobs run side by side only while the memory they plan to hold fits the device.

Each execution job (a candidate's child process and the judging of it in the verifier's process) is admitted
by a byte estimate made from its task's plan (``job_bytes``: the input, output and weight bytes measured when
the plan was made, times the copies the child and the judge hold). A ``MemoryGate`` admits jobs in arrival
order while the sum of admitted bytes stays within the budget; a job larger than the whole budget waits until
nothing else is admitted and then runs alone. Without it, four execution workers on one GPU, each on a task of
4 GiB inputs, ran out of device memory and an honest kernel ended ``verifier_error``.

Guarantees: the admitted bytes never exceed the budget except for one oversized job running alone; no job
waits forever while the jobs admitted before it finish: a request that fits may pass those waiting before it only
while each of them has waited less than ``BYPASS_S``, so a large job is passed by small ones for that long at most
and is then first in line for the bytes the running jobs give back (a strict first come, first served held a
0.3 GiB job 43 s behind a large one that did not fit yet, with eight slots on one H200 at 5adc643). Not guaranteed: the estimate is a count of copies, not a measurement; a task whose
forward allocates far more than its inputs and outputs (large intermediates) holds more than it planned, and
other processes on the device are not counted (the budget is a fraction of the device for that reason).

Also here: the cache of task plans (``HeldCache``): a plan is kept while a candidate of its task is pending, and after
that only within a small bound, so a task's module and what it holds do not stay for the life of the process.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import time

import torch

GIB = 1 << 30
# the budget where verify.memory_budget_gib is 0: a share of the device's total memory (cuda: the verifier's
# and the execution children's CUDA contexts, and other processes, live in the rest) or of the RAM available
# when the gate is made (cpu: the rest is the interpreters, the compile pool and the machine's other work)
CUDA_SHARE = 0.75
CPU_SHARE = 0.5

ALONE = 1 << 62  # a request for more than any budget: the job runs with nothing else admitted beside it
BYPASS_S = 10.0  # how long a waiting request may be passed by later ones that fit (MemoryGate)
PROCESS_BYTES = 256 << 20  # an execution child's own workspace: a CUDA context and allocator slack, or torch on cpu
CHILD_INPUT_COPIES = 3  # the trial's inputs, their pristine copy, the clone the reference runs on (verifier/child/worker.py)
CHILD_OUTPUT_COPIES = 2  # the candidate's output and the reference's, before they are saved
JUDGE_INPUT_COPIES = 1  # the trial's inputs drawn again here (verifier/judge/verdict.py)
JUDGE_OUTPUT_COPIES = 3  # the reference's outputs here, the candidate's and the child's reference outputs loaded back
WEIGHT_COPIES = 3  # the reference in the child, ModelNew (about as large), the reference here
FLOAT64_FACTOR = 2  # the float64 reference: inputs, outputs and weights once more at twice the width
# the reference forward's intermediates (TaskPlan.work_bytes): the child's reference forward and the candidate's, whose
# freed blocks its caching allocator keeps (the two need not fit the same blocks), and the judge's reference here.
# Uncounted, an H100's real batch at cc46f2f ran 21 of 160 candidates out of device memory (verifier_error): tasks
# of 0.2 GiB inputs whose forwards asked for 2 to 8.8 GiB while the gate counted their jobs at under 1 GiB each
WORK_COPIES = 3


# a task's reference timing (verifier/runs.py ``prepare_task``: its eager part, then torch.compile's, each a child
# of its own) holds less than a candidate's job: the benchmark's shape only (the extra shape is a trial's), no
# float64 copy, no judge. Its child: the model, one draw of the inputs, the template output and a call's, the
# forward's intermediates. The harness beside it (verifier/execute/harness.py): its reference's set-up call (inputs,
# outputs, intermediates, weights) and its bracket sets, the private inputs and the pool they are copied into
# (``HARNESS_SETS_BYTES`` at most, harness.SET_BUDGET, or two sets where one is larger). Charged a candidate's job,
# a big task's preparation waited for memory beside two busy slots of eight, and its candidate waited 144 s in the
# ready queue behind it (one H100's real batch at 0dae5de, k = 1)
HARNESS_SETS_BYTES = {"cuda": 2 << 30, "cpu": 256 << 20}


def timing_bytes(input_bytes: int, output_bytes: int, weight_bytes: int, work_bytes: int = 0,
                 device: str = "cuda") -> int:
    """The bytes one reference timing of a task plans to hold at its peak (its child and the harness's part)."""
    per_set = input_bytes + output_bytes
    child = input_bytes + 2 * output_bytes + weight_bytes + work_bytes
    harness = per_set + weight_bytes + work_bytes + max(HARNESS_SETS_BYTES[device], 2 * per_set)
    return int(child + harness) + PROCESS_BYTES


def job_bytes(input_bytes: int, output_bytes: int, weight_bytes: int, float64: bool, work_bytes: int = 0) -> int:
    """The bytes one execution job plans to hold at its peak (one trial at a time): the child's and the judge's
    copies of the inputs, outputs and weights, the float64 reference's when it runs, the forwards' intermediates
    (``work_bytes``: the reference's, measured when its task was planned), and the child's workspace."""
    n = (input_bytes * (CHILD_INPUT_COPIES + JUDGE_INPUT_COPIES) + output_bytes * (CHILD_OUTPUT_COPIES +
                                                                                   JUDGE_OUTPUT_COPIES)
         + weight_bytes * WEIGHT_COPIES + work_bytes * WORK_COPIES)
    if float64:
        n += FLOAT64_FACTOR * (input_bytes + output_bytes + weight_bytes + work_bytes)
    return int(n) + PROCESS_BYTES


class _Waiter:
    __slots__ = ("charge", "since", "background")

    def __init__(self, charge: int, background: bool = False):
        self.charge, self.since, self.background = charge, time.monotonic(), background


class MemoryGate:
    """A byte-budgeted admission gate shared by the threads of one process, first come first served but for a
    bounded pass.

    ``acquire(n)`` returns once the request fits (admitted + n <= budget; a request larger than the budget counts
    as the whole budget, so it runs alone) and no request before it in line has waited ``BYPASS_S`` or more;
    ``release(n)`` gives the bytes back. ``peak`` is the most bytes admitted at once. A ``background`` request
    (work nobody waits for yet: a task's torch.compile timing, runs.prepare_task) enters only when it fits and no
    other request is in line, and holds no request up however long it waits: on one H200's real batch (f8b798b)
    candidates waited 41-55 s for memory while such timings, admitted for their whole child, built their models."""

    def __init__(self, budget_bytes: int):
        if budget_bytes <= 0:
            raise ValueError(f"a memory gate needs a positive budget, got {budget_bytes} bytes")
        self.budget = int(budget_bytes)
        self.admitted = 0
        self.peak = 0
        self._line: list[_Waiter] = []  # the waiting requests, in arrival order
        self._cond = threading.Condition()

    @property
    def waiting(self) -> int:
        """Requests in line now."""
        with self._cond:
            return len(self._line)

    def _charge(self, n: int) -> int:
        return min(max(int(n), 0), self.budget)  # an oversized request fills the gate: nothing runs beside it

    def _may_enter(self, me: _Waiter) -> bool:
        if self.admitted + me.charge > self.budget:
            return False
        if me.background:
            return all(other.background for other in self._line)
        now = time.monotonic()
        for other in self._line:
            if other is me:
                return True
            if not other.background and now - other.since >= BYPASS_S:  # passed long enough: nothing behind it
                return False                                                # goes first
        return True

    def acquire(self, n: int, background: bool = False) -> None:
        me = _Waiter(self._charge(n), background)
        with self._cond:
            self._line.append(me)
            try:
                self._cond.wait_for(lambda: self._may_enter(me))
            finally:
                self._line.remove(me)
                self._cond.notify_all()  # others may fit too (or the line moved if this one gave up)
            self.admitted += me.charge
            self.peak = max(self.peak, self.admitted)

    def release(self, n: int) -> None:
        with self._cond:
            self.admitted = max(self.admitted - self._charge(n), 0)
            self._cond.notify_all()

    @contextlib.contextmanager
    def admit(self, n: int, background: bool = False):
        """Hold ``n`` bytes for the block; yields the seconds waited for them."""
        t0 = time.perf_counter()
        self.acquire(n, background)
        try:
            yield time.perf_counter() - t0
        finally:
            self.release(n)


def free_bytes(device: str) -> int:
    """Memory free on ``device`` now (cuda: the driver's count; cpu: available RAM)."""
    return torch.cuda.mem_get_info()[0] if device == "cuda" else _ram_bytes("SC_AVPHYS_PAGES")


def capacity_bytes(device: str) -> int:
    """All the memory of ``device`` (cuda: the GPU's total; cpu: physical RAM): what a job running alone could
    have. A task is refused for its size against this, never against what is free while other jobs run."""
    return torch.cuda.mem_get_info()[1] if device == "cuda" else _ram_bytes("SC_PHYS_PAGES")


def _ram_bytes(pages: str) -> int:
    """RAM in bytes from a sysconf page count (available or physical); 1 TiB where the system does not say."""
    try:
        return os.sysconf(pages) * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 1 << 40


def auto_budget(device: str, capacity: int | None = None) -> int:
    """The budget of a gate where none is configured: a share of the GPU's total memory (``capacity`` where a slot's
    process measured it), or of available RAM."""
    if device == "cuda":
        return int((capacity if capacity is not None else capacity_bytes("cuda")) * CUDA_SHARE)
    return int(free_bytes("cpu") * CPU_SHARE)


_GATES: dict[tuple, MemoryGate] = {}
_GATES_LOCK = threading.Lock()


_REMOTE = None  # a slot's trusted process (verifier/workers.py): the engine's gates, asked over its pipe


def admit_through(remote) -> None:
    """Make every gate of this process the engine's, asked through ``remote`` (``remote.admit(device, budget_gib,
    n)``, a context manager yielding the seconds waited): set once by a slot's trusted process, whose jobs share one
    device with the other slots' processes and so one budget."""
    global _REMOTE
    _REMOTE = remote


_CAPACITY: dict[str, int] = {}  # a slot's process: its devices' total memory, measured once


class _AskedGate:
    """A gate of the engine's process, for one device and budget, as a slot's trusted process sees it. The request
    carries the device's total memory as this process measures it, for the engine's automatic budget: the engine's
    process need not make a CUDA context to answer it (where it had none yet, on one H200 shared by ten test
    workers, making one ran out of memory inside the engine's answer, and an honest candidate got a
    ``verifier_error`` that was never tried again, at f9e66f9)."""

    def __init__(self, remote, device: str, budget_gib: float):
        self.remote, self.device, self.budget_gib = remote, device, budget_gib

    def admit(self, n: int, background: bool = False):
        """(A slot's requests are its candidates' and its reference timings', never in the background.)"""
        if background:
            raise ValueError("a slot's process asks the engine's gate for foreground requests only")
        capacity = None
        if self.budget_gib <= 0:
            capacity = _CAPACITY.get(self.device)
            if capacity is None:
                capacity = _CAPACITY[self.device] = capacity_bytes(self.device)
        return self.remote.admit(self.device, self.budget_gib, int(n), capacity)


def gate_for(device: str, budget_gib: float = 0.0, capacity: int | None = None) -> MemoryGate:
    """The process's gate for ``device`` (one per device and configured budget, shared by every batch of the
    process, since they share the device): ``budget_gib`` > 0 is the budget, 0 the automatic one (measured once;
    ``capacity``: the device's total memory as a slot's process measured it, see ``_AskedGate``).
    In a slot's trusted process (``admit_through``), the engine's gate of that device, asked over the pipe."""
    if budget_gib < 0:
        raise ValueError(f"verify.memory_budget_gib must be 0 (automatic) or positive, got {budget_gib}")
    if _REMOTE is not None:
        return _AskedGate(_REMOTE, device, budget_gib)  # type: ignore[return-value]
    key = (device, float(budget_gib))
    with _GATES_LOCK:
        if key not in _GATES:
            _GATES[key] = MemoryGate(int(budget_gib * GIB) if budget_gib > 0 else
                                     max(auto_budget(device, capacity), GIB))
        return _GATES[key]


def module_bytes(module) -> int:
    """Bytes of the tensors a task's module keeps between calls: tensors among its globals, and the parameters
    and buffers of nn.Modules among them."""
    total = 0
    for value in list(vars(module).values()):
        if isinstance(value, torch.Tensor):
            total += value.numel() * value.element_size()
        elif isinstance(value, torch.nn.Module):
            total += sum(t.numel() * t.element_size() for t in [*value.parameters(), *value.buffers()])
    return total


class HeldCache:
    """Values built once per key, kept while someone holds the key and, once nobody does, only within a bound.

    ``hold(key)`` for each pending user (a candidate of the task), ``release(key)`` as each is done. A value
    nobody holds is kept for the next user only while the unheld values number at most ``keep`` and their
    ``size`` sums to at most ``keep_bytes``, the least recently used dropped first; one larger than
    ``keep_bytes`` is dropped with its last user. ``get_or_build`` builds a missing value once (other callers of
    the key wait for it)."""

    def __init__(self, keep: int, keep_bytes: int, size):
        self.keep, self.keep_bytes, self._size = keep, keep_bytes, size
        self._values: dict = {}
        self._users: dict = {}
        self._kept: collections.OrderedDict = collections.OrderedDict()  # unheld keys -> size, oldest first
        self._builds: dict = {}
        self._lock = threading.Lock()

    def get_or_build(self, key, build):
        with self._lock:
            building = self._builds.setdefault(key, threading.Lock())
        with building:
            with self._lock:
                if key in self._values:
                    if key in self._kept:
                        self._kept.move_to_end(key)
                    return self._values[key]
            value = build()
            with self._lock:
                self._values[key] = value
                if not self._users.get(key):
                    self._keep(key)
            return value

    def __contains__(self, key) -> bool:
        with self._lock:
            return key in self._values

    def get(self, key, default=None):
        """The value kept for ``key``, or ``default`` (never builds it)."""
        with self._lock:
            return self._values.get(key, default)

    def held(self, key) -> bool:
        """Whether a user holds ``key`` now."""
        with self._lock:
            return bool(self._users.get(key))

    def hold(self, key) -> None:
        with self._lock:
            self._users[key] = self._users.get(key, 0) + 1
            self._kept.pop(key, None)

    def release(self, key) -> bool:
        """One user of ``key`` is done; True when a value left the cache."""
        with self._lock:
            left = self._users.get(key, 1) - 1
            if left > 0:
                self._users[key] = left
                return False
            self._users.pop(key, None)
            return key in self._values and self._keep(key)

    def _keep(self, key) -> bool:
        """Keep the unheld value of ``key`` within the bounds; True when anything was dropped (lock held)."""
        size = self._size(self._values[key])
        drop = [key] if size > self.keep_bytes or self.keep <= 0 else []
        if not drop:
            self._kept[key] = size
            self._kept.move_to_end(key)
            while len(self._kept) > self.keep or sum(self._kept.values()) > self.keep_bytes:
                drop.append(self._kept.popitem(last=False)[0])
        for old in drop:
            self._kept.pop(old, None)
            self._values.pop(old, None)
            self._builds.pop(old, None)
        return bool(drop)


class ChildTurns:
    """Execution children at a time (``VerifyConfig.exec_children``) where a batch has more slots than that
    (``judging_slots``): a slot takes a turn as its candidate's child starts and gives it back as the child ends, so
    that its judging (the held checks of the timed outputs, the trials' comparisons, a knockout) runs beside another
    slot's next child instead of holding a child's place. One per batch and backend (verifier/engine.py)."""

    def __init__(self, n: int):
        self.n = n
        self._sem = threading.BoundedSemaphore(n)

    def take(self) -> float:
        """Wait for a turn; the seconds waited."""
        t0 = time.perf_counter()
        self._sem.acquire()
        return time.perf_counter() - t0

    def give_back(self) -> None:
        self._sem.release()


_TURNS = threading.local()  # the engine's execution threads: the batch's ChildTurns of the thread's backend, or None


def turns_for_thread(turns: ChildTurns | None) -> None:
    """The child turns this thread's candidates take (``child_turn``): set by an engine's execution thread whose slot
    judges in this process."""
    _TURNS.turns = turns


@contextlib.contextmanager
def child_turn():
    """A turn for one execution child (``ChildTurns``), held for the block: the engine's, asked over the pipe in a
    slot's trusted process (``admit_through``); the thread's where one is set; else none is needed (a slot per
    child). Yields the seconds waited."""
    if _REMOTE is not None:
        with _REMOTE.child_turn() as waited:
            yield waited
        return
    turns = getattr(_TURNS, "turns", None)
    if turns is None:
        yield 0.0
        return
    waited = turns.take()
    try:
        yield waited
    finally:
        turns.give_back()
