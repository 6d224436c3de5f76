"""The device lock (verifier/common/devlock.py) with real flock(2) files: shared holders coexist, a timer gets the
device alone, a waiting timer is not starved by new shared takers, every wait is bounded, and a killed
holder frees the lock. Separate DeviceLock objects are separate open files, so threads of one process
contend exactly as processes do; the kill test uses a real process."""

import contextlib
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


def _until_a_timer_waits(holder: DeviceLock) -> None:
    """Until another lock (a thread's) waits for the device exclusive behind ``holder``'s shared hold (5 s at most)."""
    deadline = time.monotonic() + 5
    while not holder.timer_waiting() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert holder.timer_waiting()


def test_a_shared_holder_gives_way_to_a_waiting_timer_between_its_pieces_of_work(tmp_path):
    """A candidate's load and trials, and the judge's reference runs, hold the device shared piece by piece: at each
    point between pieces (``yield_to_timer``) a waiting timer gets the device first, and the holder takes it shared
    again once the timing is over. Without a waiting timer the hold is kept (nobody exclusive gets in)."""
    path = str(tmp_path / "dev.lock")
    holder, timer, probe = DeviceLock(path), DeviceLock(path), DeviceLock(path)
    assert holder.acquire(False, 1.0)
    assert not holder.timer_waiting()
    assert holder.yield_to_timer(1.0) and holder.held == "shared"
    assert not probe.acquire(True, 0.2)  # no timer waited: the hold was kept throughout
    events = []
    got = {}

    def timing():
        got["timer"] = timer.acquire(True, 10.0)
        events.append("timer got the device")
        time.sleep(0.3)
        events.append("timer done")
        timer.release()

    th = threading.Thread(target=timing)
    th.start()
    _until_a_timer_waits(holder)
    assert holder.timer_waiting() and "timer got the device" not in events  # waiting for this shared piece
    assert holder.yield_to_timer(10.0) and holder.held == "shared"
    events.append("holder shared again")
    th.join(5)
    assert got["timer"] is True
    assert events == ["timer got the device", "timer done", "holder shared again"]
    assert not holder.timer_waiting()
    for lk in (holder, timer, probe):
        lk.close()


def test_giving_way_is_bounded_and_a_lockless_job_never_waits(tmp_path):
    """A timer that holds the device past the holder's bound leaves the holder going on without the lock (every
    wait is bounded); a job with no lock file gives way to nobody."""
    path = str(tmp_path / "dev.lock")
    holder, timer = DeviceLock(path), DeviceLock(path)
    assert holder.acquire(False, 1.0)
    th = threading.Thread(target=lambda: timer.acquire(True, 10.0))
    th.start()
    _until_a_timer_waits(holder)
    t0 = time.monotonic()
    assert holder.yield_to_timer(0.3) is False and holder.held is None  # the timer keeps the device; not waited for
    assert 0.3 <= time.monotonic() - t0 < 3.0
    th.join(5)
    assert timer.held == "exclusive"
    assert holder.yield_to_timer(0.3) is False  # holding nothing, it has nothing to give
    timer.close()
    holder.close()
    assert device_lock(None).yield_to_timer(5.0) is False


def test_giving_way_has_one_budget_for_all_the_yields_of_a_job(tmp_path):
    """Each yield may wait for a neighbour's timing; all of them together wait at most the budget (a job's yields
    must never add up to its timeout). A yield that runs out of budget goes on without the lock (as a first take
    that timed out does); one with no budget left keeps the hold and lets the timer wait."""
    path = str(tmp_path / "dev.lock")
    holder = DeviceLock(path)
    assert holder.acquire(False, 1.0)

    def timed_by(t, hold_s):
        def timing():
            assert t.acquire(True, 20.0)
            time.sleep(hold_s)
            t.release()
        th = threading.Thread(target=timing)
        th.start()
        _until_a_timer_waits(holder)
        return th

    first, second, third = DeviceLock(path), DeviceLock(path), DeviceLock(path)
    th = timed_by(first, 0.3)
    assert holder.yield_to_timer(0.5) and holder.yielded_s >= 0.25  # let through, waited for, shared again
    th.join(5)
    th = timed_by(second, 1.0)
    t0 = time.monotonic()
    assert holder.yield_to_timer(0.5) is False and holder.held is None  # 0.2 s of budget left: it gave up then
    assert time.monotonic() - t0 < 0.5 and holder.yielded_s <= 0.5 + 0.1
    th.join(5)
    assert holder.acquire(False, 1.0)
    th = timed_by(third, 0.3)
    spent = holder.yielded_s
    assert holder.yield_to_timer(spent) and holder.yielded_s == spent  # no budget left: the hold is kept
    assert holder.timer_waiting()
    holder.release()
    th.join(5)
    for t in (first, second, third, holder):
        t.close()


def test_the_verifiers_judging_threads_run_side_by_side(tmp_path):
    """Judging (the reference on every trial's inputs in the verifier's process) is admitted by memory with its job,
    not one thread at a time: a process-wide lock queued every candidate's judging behind another's device-lock
    waits and knockout children (381 real candidates an hour on one H200, the device 2% busy)."""
    from kernelmill.settings import VerifyConfig
    from verifier.execute import locks

    cfg = VerifyConfig(lock_dir=str(tmp_path / "locks"))
    inside, both = threading.Barrier(2, timeout=5), []

    def judging():
        with locks.device_work(cfg, "cuda"):
            inside.wait()  # raises BrokenBarrierError unless the other thread is inside at the same time
            both.append(True)

    threads = [threading.Thread(target=judging) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    assert both == [True, True]


def test_the_verifiers_own_device_work_holds_the_device_shared_on_cuda(tmp_path):
    """The verifier's process running the reference (a task's plan, the judging, inputs drawn for a child) holds the
    device lock shared on cuda, so that no other process's timing phase has that work inside its window; a timer
    gets the device once the work is over. On cpu only timing phases take the lock (the work holds nothing)."""
    from kernelmill.settings import VerifyConfig
    from verifier.execute import locks

    cfg = VerifyConfig(lock_dir=str(tmp_path / "locks"))
    with DeviceLock(locks.lock_path(cfg, "cuda")) as timer:
        with locks.device_work(cfg, "cuda") as held:
            assert held.held == "shared"
            assert not timer.acquire(True, 0.2)  # no timing while the reference runs here
        assert held.held is None and timer.acquire(True, 1.0)
        timer.release()
    with DeviceLock(locks.lock_path(cfg, "cpu")) as timer, locks.device_work(cfg, "cpu") as held:
        assert held.held is None and timer.acquire(True, 1.0)


def test_a_tasks_plan_runs_its_reference_inside_the_verifiers_device_work(tmp_path, monkeypatch):
    """Every reference run of a task's plan (its draws, forwards and float64 check) is inside ``device_work`` for the
    plan's config and backend: a plan made on cuda while another candidate times ran the reference with no lock, in
    that candidate's timed window. The reference's construction on the cpu (its weights' draws: host work, seconds
    for a large network) is outside it: a timer does not wait for it."""
    from bench.lib import fixtures as fx
    from kernelmill.settings import VerifyConfig
    from verifier.execute import locks
    from verifier.judge import plan as plan_mod

    real, inside, entered, events = locks.device_work, [False], [], []

    @contextlib.contextmanager
    def watched(cfg, backend):
        with real(cfg, backend) as lock:
            entered.append((cfg, backend))
            inside[0] = True
            try:
                yield lock
            finally:
                inside[0] = False

    constructed, drawn = plan_mod.cpu_model, plan_mod.draw_inputs

    def cpu_model(*a, **kw):
        events.append(("construct", inside[0]))
        return constructed(*a, **kw)

    def draw_inputs(*a, **kw):
        events.append(("draw", inside[0]))
        return drawn(*a, **kw)

    monkeypatch.setattr(plan_mod, "device_work", watched)
    monkeypatch.setattr(plan_mod, "cpu_model", cpu_model)
    monkeypatch.setattr(plan_mod, "draw_inputs", draw_inputs)
    cfg = VerifyConfig(lock_dir=str(tmp_path / "locks"), other_shape=False)
    p = plan_mod._build_plan(fx.RELU_TASK, "cpu", cfg, "relu")
    assert entered == [(cfg, "cpu")] and p.output_bytes > 0 and not p.task_fault
    assert events[0] == ("construct", False) and len(events) >= 4, events
    assert all(held for kind, held in events if kind == "draw"), events


def test_a_tasks_plan_gives_way_to_a_waiting_timer_between_its_pieces(tmp_path, monkeypatch):
    """A task's plan holds the device shared in pieces (two draws and a forward; a third draw and its forward; the
    float64 check; the extra shape's pick) and gives way between them: a timer that queues while the plan runs gets
    the device before the plan is over, not after its whole hold (one hold of 0.7 s median, p90 1.7 s, on one H200,
    what timers drained behind). RNG_LOCK is free at every point of giving way: a harness of the same process draws
    its inputs under it while it clocks the timer's candidate."""
    from bench.lib import fixtures as fx
    from kernelmill.settings import VerifyConfig
    from verifier.execute import locks
    from verifier.judge import plan as plan_mod
    from verifier.judge.outputs import RNG_LOCK

    cfg = VerifyConfig(lock_dir=str(tmp_path / "locks"))
    real, events, holding, queued = locks.device_work, [], threading.Event(), threading.Event()

    def rng_free() -> bool:
        got = []

        def take():
            got.append(RNG_LOCK.acquire(timeout=2.0))
            if got[0]:
                RNG_LOCK.release()
        t = threading.Thread(target=take)
        t.start()
        t.join()
        return got[0]

    @contextlib.contextmanager
    def on_the_cuda_lock(cfg_, backend):
        with real(cfg_, "cuda") as lock:  # the lock a plan on cuda holds (the reference runs on the cpu here)
            assert lock.held == "shared"
            yield_to_timer = lock.yield_to_timer

            def watched(budget_s):
                events.append(("give_way", rng_free()))
                return yield_to_timer(budget_s)

            lock.yield_to_timer = watched
            holding.set()
            yield lock
        events.append(("plan_over",))

    drawn = plan_mod.draw_inputs

    def draw_inputs(*a, **kw):  # the first draw waits for the timer to queue: it waits while the plan holds on
        if not queued.is_set():
            assert queued.wait(10)
            time.sleep(0.3)
        return drawn(*a, **kw)

    def timer():
        assert holding.wait(30)
        with DeviceLock(locks.lock_path(cfg, "cuda")) as t:
            queued.set()
            assert t.acquire(True, 20)
            events.append(("timer_got",))

    monkeypatch.setattr(plan_mod, "device_work", on_the_cuda_lock)
    monkeypatch.setattr(plan_mod, "draw_inputs", draw_inputs)
    th = threading.Thread(target=timer)
    th.start()
    p = plan_mod._build_plan(fx.RELU_TASK, "cpu", cfg, "relu")
    th.join(30)
    assert p.output_bytes > 0 and not p.task_fault and p.other_shape
    gives = [e for e in events if e[0] == "give_way"]
    assert len(gives) >= 3 and all(free for _, free in gives), events
    assert events.index(("timer_got",)) < events.index(("plan_over",)), events


def test_host_work_aside_lets_a_timer_in_and_takes_the_hold_back_within_the_budget(tmp_path):
    # the child's profiler start is host work: while it runs the hold is dropped (a timer gets the device without
    # waiting for it), and after it the hold is taken back, behind the timer, the wait counted with the yields
    path = str(tmp_path / "dev.lock")
    child, timer = DeviceLock(path), DeviceLock(path)
    assert child.acquire(False, 1.0)
    with child.aside(5.0):
        assert child.held is None
        assert timer.acquire(True, 0.5)  # at once: nothing holds the device during host work
        back = threading.Timer(0.3, timer.release)
        back.start()
    back.join()
    assert child.held == "shared" and 0.2 <= child.yielded_s < 2.0  # it waited for the timer's phase
    # past the budget the hold is kept throughout: no job is pushed towards its timeout by timers
    with child.aside(child.yielded_s):
        assert child.held == "shared"
        assert not timer.acquire(True, 0.2)
    # a process that holds nothing (cpu trials, a lockless job) is left as it is
    child.release()
    with child.aside(5.0):
        assert child.held is None
    assert child.held is None
    with device_lock(None).aside(5.0):
        pass
    for lk in (child, timer):
        lk.close()


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
