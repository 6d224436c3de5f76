"""Giving way on the device lock (verifier/common/devlock.py): a shared holder's points of giving way let a waiting
timer in between its pieces of work and take the hold back within one budget per job; host work aside; the
verifier's own device work (its judging threads, a task's plan) held shared on cuda and giving way between its
pieces. Real flock(2) files, as tests/test_devlock.py."""

import contextlib
import threading
import time


from verifier.common.devlock import DeviceLock, device_lock

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
