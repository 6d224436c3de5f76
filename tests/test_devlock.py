"""The device lock (verifier/common/devlock.py) with real flock(2) files: shared holders coexist, a timer gets the
device alone, a waiting timer is not starved by new shared takers, every wait is bounded, and a killed
holder frees the lock. Separate DeviceLock objects are separate open files, so threads of one process
contend exactly as processes do; the kill test uses a real process."""

import subprocess
import sys
import threading
import time

from verifier.common.devlock import DeviceLock, device_lock


def test_shared_holders_coexist_and_exclusive_waits_bounded(tmp_path):
    path = str(tmp_path / "dev.lock")
    with DeviceLock(path) as a, DeviceLock(path) as b, DeviceLock(path) as t:
        assert a.acquire(False, 1.0) and b.acquire(False, 1.0)
        assert a.held == b.held == "shared"
        t0 = time.monotonic()
        assert not t.acquire(True, 0.3)  # the timer gives up after its bound, it does not hang
        assert 0.3 <= time.monotonic() - t0 < 2.0 and t.held is None
        a.release()
        b.release()
        assert t.acquire(True, 1.0) and t.held == "exclusive"
        assert not a.acquire(False, 0.2)  # nobody shares the device with a timer
        t.release()
        assert a.acquire(False, 1.0)


def test_waiting_timer_is_not_starved_by_new_shared_takers(tmp_path):
    path = str(tmp_path / "dev.lock")
    reader, timer, late = DeviceLock(path), DeviceLock(path), DeviceLock(path)
    assert reader.acquire(False, 1.0)
    got = {}
    th = threading.Thread(target=lambda: got.setdefault("timer", timer.acquire(True, 10.0)))
    th.start()
    time.sleep(0.3)  # the timer is now waiting behind the reader, holding the turnstile
    assert not late.acquire(False, 0.3)  # a new shared taker queues behind the waiting timer
    reader.release()
    th.join(5)
    assert got["timer"] is True and timer.held == "exclusive"
    timer.release()
    assert late.acquire(False, 1.0)
    for lk in (reader, timer, late):
        lk.close()


def test_exclusive_intervals_never_overlap_other_work(tmp_path):
    path = str(tmp_path / "dev.lock")
    log, log_lock = [], threading.Lock()

    def worker(k):
        with DeviceLock(path) as lk:
            for i in range(6):
                exclusive = (i + k) % 3 == 0
                assert lk.acquire(exclusive, 20.0)
                t0 = time.monotonic()
                time.sleep(0.02)
                t1 = time.monotonic()
                lk.release()
                with log_lock:
                    log.append((exclusive, t0, t1, k))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert len(log) == 24
    shared = [e for e in log if not e[0]]
    assert any(a[3] != b[3] and a[1] < b[2] and b[1] < a[2] for a in shared for b in shared)  # sharing happened
    for ex in (e for e in log if e[0]):
        for other in log:
            if other is not ex:
                assert other[2] <= ex[1] or other[1] >= ex[2], (ex, other)


def test_a_killed_holder_frees_the_device(tmp_path):
    path = str(tmp_path / "dev.lock")
    code = ("import sys, time\nfrom verifier.common.devlock import DeviceLock\nlk = DeviceLock(sys.argv[1])\n"
            "assert lk.acquire(True, 5)\nprint('held', flush=True)\ntime.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code, path], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        with DeviceLock(path) as mine:
            assert not mine.acquire(False, 0.2)
            p.kill()
            p.wait(10)
            assert mine.acquire(True, 2.0)
    finally:
        p.kill()


def test_no_lock_file_means_no_lock():
    lk = device_lock(None)
    assert lk.acquire(True, 0.0) is False and lk.held is None
    lk.close()


def test_every_verifier_process_of_a_device_takes_one_lock_whatever_its_build_root(tmp_path, monkeypatch):
    """The lock is the device's, not the build root's: two verifier processes timing on one GPU with their own build
    directories (a batch beside a reward server, parallel test workers) must exclude each other, and pools on
    different GPUs must not."""
    from kernelmill.settings import VerifyConfig
    from verifier.execute.locks import lock_path

    a = VerifyConfig(build_dir=str(tmp_path / "a"), lock_dir=str(tmp_path / "locks"))
    b = VerifyConfig(build_dir=str(tmp_path / "b"), lock_dir=str(tmp_path / "locks"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    unset = lock_path(a, "cuda")
    assert unset == lock_path(b, "cuda") and unset.startswith(str(tmp_path / "locks"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert lock_path(b, "cuda") == unset  # device 0 named or not
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert lock_path(a, "cuda") == unset  # the first visible device is the one a verifier times on
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert lock_path(a, "cuda") != unset and lock_path(a, "cpu") == lock_path(b, "cpu") != unset
    assert lock_path(VerifyConfig(device_lock=False), "cuda") == ""
    # the default directory is one per host and user, the same for any build root
    assert VerifyConfig(build_dir=str(tmp_path / "a")).lock_root() == VerifyConfig().lock_root()
    # and it is a real exclusion: a timer of one build root holds off the other's
    with DeviceLock(lock_path(a, "cuda")) as t, DeviceLock(lock_path(b, "cuda")) as u:
        assert t.acquire(True, 1.0)
        assert not u.acquire(True, 0.2)


def test_a_lock_directory_of_another_owner_or_a_link_is_refused_before_any_candidate(tmp_path):
    """The default lock directory is in the shared temporary directory: one planted there as a link (or owned by
    someone else) would let its owner's files decide our locks, so it is a clear error naming the setting, raised
    before the batch starts, not a candidate's verdict."""
    import pytest

    from kernelmill.errors import InputError
    from kernelmill.schema import Candidate, Task
    from kernelmill.settings import VerifyConfig
    from verifier.engine import verify_batch
    from verifier.execute.locks import lock_path

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "planted").symlink_to(tmp_path / "elsewhere")
    cfg = VerifyConfig(build_dir=str(tmp_path / "b"), lock_dir=str(tmp_path / "planted"))
    with pytest.raises(InputError, match="lock_dir .*planted.*not a directory of this user"):
        lock_path(cfg, "cpu")
    task = Task.from_code("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
                          "def get_inputs():\n    return [torch.randn(4)]\ndef get_init_inputs():\n    return []\n",
                          name="twice", source="seed", level=1)
    cand = Candidate(candidate_id="c", task_id=task.task_id, backend="cpu", generator="test", code="x = 1")
    with pytest.raises(InputError, match="lock_dir"):
        verify_batch([(task, cand)], config=cfg)
    assert list((tmp_path / "elsewhere").iterdir()) == []  # nothing made through the link


def test_a_lock_directory_replaced_by_a_link_after_its_check_is_refused(tmp_path):
    """The directory is checked once per process (it is asked for per job and per shared lock), not trusted forever:
    one removed and planted again as a link after a good check is checked again and refused."""
    import shutil

    import pytest

    from kernelmill.errors import InputError
    from kernelmill.settings import VerifyConfig
    from verifier.execute.locks import lock_path

    cfg = VerifyConfig(build_dir=str(tmp_path / "b"), lock_dir=str(tmp_path / "locks"))
    first = lock_path(cfg, "cpu")
    assert first == lock_path(cfg, "cpu") == str(tmp_path / "locks" / "timing-cpu.lock")
    shutil.rmtree(tmp_path / "locks")
    assert lock_path(cfg, "cpu") == first and (tmp_path / "locks").is_dir()  # removed: made again
    shutil.rmtree(tmp_path / "locks")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "locks").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(InputError, match="lock_dir .*locks.*not a directory of this user"):
        lock_path(cfg, "cpu")


def test_timers_go_one_after_another_before_shared_takers_come_back(tmp_path):
    # two timers wait while a trial holds the device shared; the trial gives way and wants the device back: the
    # second timer times right after the first (no second wait for shared pieces of work), then the trial goes on
    path = str(tmp_path / "dev.lock")
    trial, t1, t2 = DeviceLock(path), DeviceLock(path), DeviceLock(path)
    order, lock = [], threading.Lock()

    def timer(lk, name, hold_s):
        assert lk.acquire(True, 10.0)
        with lock:
            order.append(name)
        time.sleep(hold_s)
        lk.release()

    assert trial.acquire(False, 1.0)
    a = threading.Thread(target=timer, args=(t1, "t1", 0.3))
    a.start()
    time.sleep(0.1)
    b = threading.Thread(target=timer, args=(t2, "t2", 0.3))
    b.start()
    time.sleep(0.1)
    assert trial.timer_waiting()
    assert trial.yield_to_timer(10.0)  # back only after both timers
    with lock:
        order.append("trial")
    a.join(5)
    b.join(5)
    assert order == ["t1", "t2", "trial"] and 0.5 <= trial.yielded_s < 3.0
    assert not trial.timer_waiting()  # the queue empties as the timers let go
    for lk in (trial, t1, t2):
        lk.close()


def test_a_shared_taker_stands_back_for_queued_timers_only_so_long(tmp_path, monkeypatch):
    # a timers' queue that does not empty (a timer stuck between joining it and the turnstile) delays shared work by
    # TIMERS_FIRST_S at most: then the taker goes to the turnstile as before and gets the device shared
    import fcntl
    import os

    from verifier.common import devlock

    monkeypatch.setattr(devlock, "TIMERS_FIRST_S", 0.4)
    path = str(tmp_path / "dev.lock")
    late = DeviceLock(path)
    stuck = os.open(path + ".timers", os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(stuck, fcntl.LOCK_SH)
    t0 = time.monotonic()
    assert late.acquire(False, 5.0) and late.held == "shared"
    assert 0.4 <= time.monotonic() - t0 < 2.0
    late.release()
    fcntl.flock(stuck, fcntl.LOCK_UN)
    os.close(stuck)
    t0 = time.monotonic()
    assert late.acquire(False, 5.0) and time.monotonic() - t0 < 0.2  # no queue: no wait
    # a timer that gave up waiting leaves the queue
    holder, timer = DeviceLock(path), DeviceLock(path)
    late.release()
    assert holder.acquire(False, 1.0)
    assert not timer.acquire(True, 0.3) and timer.held is None
    assert not holder.timer_waiting()
    for lk in (holder, timer, late):
        lk.close()



def test_a_timer_behind_the_timers_goes_after_those_queued_and_only_so_long(tmp_path, monkeypatch):
    """A timer that goes behind the others (a task's torch.compile timing: nobody waits for it yet) stands back while
    other timers are queued and joins them after: a timer that came later but is waited for (a reference's eager
    part, a candidate's timing) takes the device first. A queue that never empties holds it BEHIND_TIMERS_S at
    most; with no timer queued it waits for nothing."""
    import fcntl
    import os

    from verifier.common import devlock

    path = str(tmp_path / "dev.lock")
    trial, first, behind, later = (DeviceLock(path) for _ in range(4))
    order, lock = [], threading.Lock()

    def timer(lk, name, **kw):
        assert lk.acquire(True, 10.0, **kw)
        with lock:
            order.append(name)
        time.sleep(0.05)
        lk.release()

    assert trial.acquire(False, 1.0)  # shared work holds the device: the timers queue
    threads = [threading.Thread(target=timer, args=(first, "first"))]
    threads[-1].start()
    wait_for(trial.timer_waiting)
    threads.append(threading.Thread(target=timer, args=(behind, "behind"), kwargs={"behind_timers": True}))
    threads[-1].start()
    time.sleep(0.2)  # (behind stands back: not yet in the queue)
    threads.append(threading.Thread(target=timer, args=(later, "later")))
    threads[-1].start()
    time.sleep(0.2)
    trial.release()
    for t in threads:
        t.join(10)
    assert order == ["first", "later", "behind"], order
    # a queue that does not empty (a timer stuck in it) holds it back BEHIND_TIMERS_S, then it joins as any timer
    monkeypatch.setattr(devlock, "BEHIND_TIMERS_S", 0.4)
    stuck = os.open(path + ".timers", os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(stuck, fcntl.LOCK_SH)
    t0 = time.monotonic()
    assert behind.acquire(True, 5.0, behind_timers=True) and behind.held == "exclusive"
    assert time.monotonic() - t0 >= 0.4
    behind.release()
    fcntl.flock(stuck, fcntl.LOCK_UN)
    os.close(stuck)
    assert behind.acquire(True, 5.0, behind_timers=True)  # nothing queued: it takes the device as any timer
    for lk in (trial, first, behind, later):
        lk.close()


def wait_for(pred) -> None:
    deadline = time.monotonic() + 10  # a bound on a broken lock, not a timing assertion
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert pred()


def test_a_trace_beside_the_lock_records_every_hold_and_blames_the_drain_on_the_last_section(tmp_path):
    """bench/lib/lock_trace.py: with a trace file beside the lock, each hold is appended as it ends (mode, when it
    was asked for, got, let go, the line that took it, the last point of giving way it passed holding on, the line
    that let go); the summary splits the wall by the lock's state and blames a timer's wait on the section of code
    of the shared hold that let go last. No trace file, nothing written."""
    from bench.lib import lock_trace
    from verifier.common.devlock import lock_files

    path = str(tmp_path / "dev.lock")
    with DeviceLock(path) as quiet:  # no trace yet: a hold leaves no file behind
        assert quiet.acquire(False, 1.0)
    assert not (tmp_path / "dev.lock.trace").exists() and len(lock_files(path)) == 3
    trace = lock_trace.start(path)
    assert lock_files(path)[-1] == trace  # a sandboxed process binds it with the lock's files
    short, long_, timer = DeviceLock(path), DeviceLock(path), DeviceLock(path)
    assert short.acquire(False, 1.0) and long_.acquire(False, 1.0)
    long_.yield_to_timer(5.0)  # no timer waits yet: the hold goes on past this point
    passed_line = sys._getframe().f_lineno - 1
    got = {}
    th = threading.Thread(target=lambda: got.setdefault("t", timer.acquire(True, 10.0)))
    th.start()
    time.sleep(0.1)
    short.release()  # one piece ends soon, the other holds the timer up
    time.sleep(0.4)
    long_.release()
    let_go_line = sys._getframe().f_lineno - 1
    th.join(5)
    assert got["t"]
    time.sleep(0.1)
    timer.release()
    for lk in (short, long_, timer):
        lk.close()
    holds = lock_trace.read(trace)
    assert sorted(h.mode for h in holds) == ["s", "s", "x"]
    section = f"test_devlock.py:{passed_line} -> test_devlock.py:{let_go_line}"
    assert [h.section for h in holds if h.mode == "s" and h.released - h.got > 0.4] == [section]
    rec = lock_trace.summarize(trace)
    assert 0.35 < rec["draining"] < 0.8 and 0.05 < rec["exclusive"] < 0.5 and rec["timers"] == 1
    assert max(rec["blame"], key=lambda s: rec["blame"][s][0]) == section
    assert rec["pieces"][section][1] > 0.4  # the section's own seconds: from the point passed to the let-go
    text = "\n".join(lock_trace.lines(rec))
    assert "timers wait, shared work drains" in text and section in text
    # a candidate's scribbles are dropped
    (tmp_path / "dev.lock.trace").write_text("garbage line\n1 s 3 2 1 x.py:1 2 x.py:1 x.py:2\n")
    assert lock_trace.read(trace) == [] and lock_trace.summarize(trace) == {}
