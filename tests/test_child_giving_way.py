"""The execution child's points of giving way (verifier/child/loading.py ``giving_way``, verifier/child/timing.py
``warm_up`` and ``forward_waits_on_host``, verifier/child/worker.py's channel questions): where a shared holder
of the device lets a waiting timer in, the device idle, so that no timer waits through a slow model's host or device
work. The lock itself is tests/test_devlock.py's."""

import contextlib
import threading
import time

from verifier.common.devlock import DeviceLock


def test_a_candidates_construction_gives_way_to_a_waiting_timer_between_its_parameters(tmp_path):
    """ModelNew's construction is host work held shared (its weights' draws: seconds for a large network). A timer
    that comes during it gets the device at the next parameter the candidate registers (verifier/child/loading.py
    ``giving_way``), not once the whole construction is over, and the holder has the device shared again after it;
    the registration hook is gone once the construction is. Without the points of giving way the timer waits for
    all of it."""
    import torch

    from verifier.child.loading import giving_way
    from verifier.common.backends import CpuBackend

    class Slow(torch.nn.Module):  # 40 layers, 25 ms of host work each before the layer's parameter is registered
        def __init__(self):
            super().__init__()
            for i in range(40):
                time.sleep(0.025)
                setattr(self, f"w{i}", torch.nn.Parameter(torch.zeros(4)))

    def construct(gives_way: bool):
        path = str(tmp_path / f"dev-{gives_way}.lock")
        holder, timer = DeviceLock(path), DeviceLock(path)
        assert holder.acquire(False, 1.0)
        got = {}

        def timing():
            time.sleep(0.2)  # the construction is under way
            t0 = time.monotonic()
            got["timer"] = timer.acquire(True, 10.0)
            got["wait"] = time.monotonic() - t0
            time.sleep(0.05)
            timer.release()

        th = threading.Thread(target=timing)
        th.start()
        ctx = giving_way(holder, CpuBackend(), 30.0) if gives_way else contextlib.nullcontext()
        with ctx:
            Slow()
        held = holder.held
        holder.close()  # the construction's piece of work is over
        th.join(10)
        timer.close()
        assert got["timer"] is True
        return got["wait"], held

    wait, held = construct(True)
    assert wait < 0.25 and held == "shared", wait
    assert not torch.nn.modules.module._global_parameter_registration_hooks  # the hook went with the construction
    wait_without, _ = construct(False)
    assert wait_without > 0.5, wait_without


def test_the_host_wait_check_gives_way_before_each_of_its_calls_and_fails_to_no_hint():
    """verifier/child/timing.py forward_waits_on_host: a point of giving way before each of its calls, the device
    idle (a slow model's calls are not one piece of shared work for a timer to wait through); every check must say
    the forward waits; a forward or a check that raises is no hint."""
    from verifier.child.timing import WAIT_CHECKS, forward_waits_on_host

    class Backend:
        def __init__(self, answers):
            self.answers, self.log = list(answers), []

        def synchronize(self):
            self.log.append("sync")

        def waits_on_host(self, fn, host_s):
            self.log.append("check")
            fn()
            return self.answers.pop(0)

    def run(answers, fn=lambda x: x):
        b = Backend(answers)
        got = forward_waits_on_host(b, lambda *a: (b.log.append("call"), fn(*a))[1], lambda s: [s], [1, 2, 3],
                                    lambda: b.log.append("give way"))
        return got, b.log

    got, log = run([True] * WAIT_CHECKS)
    assert got is True
    assert log == ["sync", "give way", "call"] * 2 + ["sync", "give way", "check", "call"] * WAIT_CHECKS
    got, log = run([False, True])
    assert got is False and log.count("check") == 1  # one check that says no ends it
    got, log = run([True, False])
    assert got is False and log.count("check") == 2

    def broken(x):
        raise RuntimeError("a forward that fails here")

    assert run([True] * WAIT_CHECKS, broken)[0] is False
    # the host time given (the warm-up's): no plain calls of its own, straight to the checks
    b = Backend([True] * WAIT_CHECKS)
    assert forward_waits_on_host(b, lambda *a: b.log.append("call"), lambda s: [s], [1, 2, 3],
                                 lambda: b.log.append("give way"), host_s=1e-3) is True
    assert b.log == ["sync", "give way", "check", "call"] * WAIT_CHECKS


def test_the_warm_up_gives_way_between_its_calls_the_device_idle_and_times_their_host_side():
    """verifier/child/timing.py warm_up: on cuda (a point of giving way handed in) the device is synchronised and
    the hold offered to a waiting timer between two calls (a slow model's three calls held a timer 1.2 s on one
    H200, 6bb94ce), and the least host time of the calls after the first comes back for the host-wait check; on cpu
    the calls queue behind each other with one synchronisation at the end."""
    from verifier.child.timing import warm_up

    log = []

    class Backend:
        def synchronize(self):
            log.append("sync")

    def call(*a):
        log.append("call")
        time.sleep(0.002)

    host_s = warm_up(Backend(), call, lambda s: [s], [1, 2, 3, 4], 3, lambda: log.append("give way"))
    assert log == ["call", "sync", "give way", "call", "sync", "give way", "call", "sync"], log
    assert 0.002 <= host_s < 0.5
    log.clear()
    assert warm_up(Backend(), call, lambda s: [s], [1, 2, 3, 4], 3) == float("inf")
    assert log == ["call", "call", "call", "sync"], log
    log.clear()
    assert warm_up(Backend(), call, lambda s: [s], [1], 3, lambda: log.append("give way")) == float("inf")
    assert log == ["call", "sync"]


def test_the_one_at_a_time_probes_fit_their_share_of_the_exclusive_hold():
    """verifier/child/timing.py probe_count: the probes (``launch_us``, a figure that decides nothing) run inside the
    timing's exclusive hold, so a slow model gets as many as fit ``PROBE_BUDGET_S`` (at least two) where a fast one
    gets ``gap_probes``; a slow model's ten calls had held every other slot's trials up to 2 s."""
    from verifier.child import timing

    class Backend:
        def synchronize(self):
            pass

    def model(call_s):
        return lambda *a: time.sleep(call_s)

    draw = lambda s: [s]  # noqa: E731
    assert timing.probe_count(Backend(), model(0.0005), draw, [1, 2], 10) == 10
    slow = timing.probe_count(Backend(), model(0.1), draw, [1, 2], 10)
    assert slow == max(2, int(timing.PROBE_BUDGET_S / 0.1)) and slow * 0.1 <= max(2 * 0.1, timing.PROBE_BUDGET_S)
    assert timing.probe_count(Backend(), model(0.4), draw, [1, 2], 10) == 2


def test_the_candidate_child_never_waits_on_the_verifier_holding_the_device():
    """The channel's questions that wait on the verifier's own work (a trial's seed: the last output sealed, the
    next trial's inputs drawn; the timing seeds: the last trial's output sealed, seconds for a large one) are asked
    with the shared hold let go (``DeviceLock.aside``), so that a waiting timer never waits for the verifier's host
    work. One H200's real batch (4e97331) drained 10.9 s over six timers' waits through the timing seeds asked
    held."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).resolve().parents[1] / "verifier/child/worker.py").read_text())
    asks, aside = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.With) and any(
                isinstance(i.context_expr, ast.Call) and isinstance(i.context_expr.func, ast.Attribute)
                and i.context_expr.func.attr == "aside" for i in node.items):
            aside.update(id(n) for n in ast.walk(node))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("trial_seed", "timing_seeds"):
            asks.append(node)
    assert sorted({a.func.attr for a in asks}) == ["timing_seeds", "trial_seed"], [a.func.attr for a in asks]
    held = [f"{a.func.attr} at line {a.lineno}" for a in asks if id(a) not in aside]
    assert not held, held


def test_a_trial_gives_way_between_its_reference_and_the_candidates_forward():
    """A trial's inputs and its reference's run (odd trials) are one piece of device work, the candidate's forward
    another: the trial gives way between them, its device idle (the sync after the reference), so that a timer that
    came meanwhile waits for one of them, not both (one H200's real batch, 7ba3cb6: the trial's section was the one
    timers drained behind longest, 11.8 s over 22 waits). Read from the child's source: the cpu backend, the only
    one here, holds no device lock."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).resolve().parents[1] / "verifier/child/worker.py").read_text())
    calls = sorted(((n.lineno, n) for n in ast.walk(tree) if isinstance(n, ast.Call)), key=lambda x: x[0])

    def line_of(pred) -> list[int]:
        return [ln for ln, n in calls if pred(n)]

    def attr(n, name):
        return isinstance(n.func, ast.Attribute) and n.func.attr == name

    sync_after_ref = line_of(lambda n: attr(n, "part") and n.args and getattr(n.args[0], "value", "") == "trial_reference")
    forward = line_of(lambda n: isinstance(n.func, ast.Name) and n.func.id == "model_new")
    yields = line_of(lambda n: attr(n, "yield_to_timer"))
    assert len(forward) == 1 and any(ln < forward[0] for ln in sync_after_ref), (sync_after_ref, forward)
    before = max(ln for ln in sync_after_ref if ln < forward[0])  # (an even trial's reference runs after the forward)
    assert any(before < ln < forward[0] for ln in yields), (before, forward, yields)
