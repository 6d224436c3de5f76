"""Red team: a candidate that stands in the timers' queue for ever (verifier/common/devlock.py).

The execution child opens its device lock's files (it takes the lock for its timing phase), so its native code can
hold the timers' queue (``<lock>.timers``) shared from import to exit, as a timer waiting for the device does, without
ever timing. Every shared taker of the device then stands back (``TIMERS_FIRST_S`` at most per take) and every
shared holder's yield finds "a timer waiting". What must hold: the damage is bounded time of the neighbours, never a
number of theirs and never the device: a neighbour's shared take waits ``TIMERS_FIRST_S`` at most, all its yields
together its budget, a real timer still gets the device alone at once and its timing has nobody shared beside it
(``held_exclusive``: what the harness counts a bracket's hold by), and once the flooder is gone nothing waits at
all. The flooder is a real process, as the candidate's child is."""

import subprocess
import sys
import textwrap
import time

import pytest

from verifier.common import devlock
from verifier.common.devlock import DeviceLock, held_exclusive

FLOODER = textwrap.dedent("""
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1] + ".timers", os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_SH)  # in the queue, as a waiting timer is; it never asks for the device
    print("queued", flush=True)
    time.sleep(600)
""")


@pytest.fixture
def flooder(tmp_path):
    path = str(tmp_path / "timing-cuda-0.lock")
    proc = subprocess.Popen([sys.executable, "-c", FLOODER, path], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "queued"
        yield path, proc
    finally:
        proc.kill()
        proc.wait(10)


def test_a_candidate_holding_the_timers_queue_costs_its_neighbours_bounded_time_and_nothing_else(flooder, monkeypatch):
    monkeypatch.setattr(devlock, "TIMERS_FIRST_S", 0.4)
    path, proc = flooder
    trial, judge, timer = DeviceLock(path), DeviceLock(path), DeviceLock(path)
    # a neighbour's shared take stands back TIMERS_FIRST_S at most, then gets the device shared
    t0 = time.monotonic()
    assert trial.acquire(False, 10.0) and trial.held == "shared"
    assert 0.4 <= time.monotonic() - t0 < 2.0
    assert trial.timer_waiting()  # the flood reads as a waiting timer ...
    # ... so each yield gives way, but all of them together within the job's budget, and the hold comes back
    t0 = time.monotonic()
    for _ in range(20):
        assert trial.yield_to_timer(1.0)
    assert time.monotonic() - t0 < 1.0 + 0.4 + 1.0 and trial.yielded_s <= 1.0 + 0.4 + 0.1
    assert trial.held == "shared"
    # a real timer is not held back by the queue: it waits for the shared holders it should wait for, and no longer
    trial.release()
    t0 = time.monotonic()
    assert timer.acquire(True, 10.0) and timer.held == "exclusive"
    assert time.monotonic() - t0 < 0.5
    assert held_exclusive(path)  # what the harness reads for each bracket: the device alone
    assert not judge.acquire(False, 0.3) and judge.held is None  # nobody shared beside the timing, flood or not
    timer.release()
    # the flooder gone, nothing stands back
    proc.kill()
    proc.wait(10)
    t0 = time.monotonic()
    assert judge.acquire(False, 5.0) and time.monotonic() - t0 < 0.2
    assert not judge.timer_waiting()
    for lk in (trial, judge, timer):
        lk.close()
