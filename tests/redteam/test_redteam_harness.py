"""The trusted harness (verifier/execute/harness.py) against compute servers that lie, on the cpu backend.

The harness runs in the verifier's process; a compute server asks it for clocked brackets over the job's channel.
Here the compute server is a thread of the test speaking the real protocol (verifier/child/harness_client.py, or raw
messages where the case needs to break it), so each class of lie is checked in milliseconds: the clock, the timed
outputs, the picks and the late writes are the harness's, whatever the server says or does to its own objects."""

import statistics
import threading
import time

import pytest
import torch

from verifier import cheats
from verifier.child.channel import Channel
from verifier.child.harness_client import BracketClient
from verifier.execute.channel import Driver
from verifier.execute.brackets import Bracket, interval, null_for, order_interval, tight
from verifier.execute.harness import Harness
from verifier.judge.checks import check_channel
from verifier.judge.outputs import Evidence


def _draw(seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(32, 128, generator=g)]


def _session(tmp_path, serve, *, check=True, keep=3, draw=_draw, **kw):
    """Run ``serve(client, channel)`` as the child against a real Driver + Harness; the harness's result."""
    h = Harness("cpu", tmp_path, torch.nn.ReLU, draw, check=check, keep=keep, budget_s=5.0, **kw)
    d = Driver(tmp_path, n_trials=0, n_timing=0, on_bracket=h.serve)
    ch = Channel(tmp_path)
    try:
        serve(BracketClient(ch, "cpu"), ch)
    finally:
        ch.close()
        ledger = d.close()
    assert not ledger.harness_error, ledger.harness_error
    return h.close()


def test_an_honest_server_is_clocked_checked_and_sampled_by_the_harness(tmp_path):
    def serve(client, ch):
        for _ in range(4):
            client.bracket("candidate", torch.relu)

    got = _session(tmp_path, serve)
    assert len(got.brackets) == 4 and got.brackets[0].calls == 1  # a probe first, then as many calls as fit
    assert not got.problems and got.per_call_s("candidate") > 0
    assert len(got.kept) == 3
    for inputs, outs in got.kept:  # the picks are pairs the harness itself drew and read back
        assert torch.equal(outs[0], torch.relu(inputs[0]))


def test_a_server_that_skips_work_on_some_timed_calls_is_seen_on_every_call(tmp_path):
    """docs/ANTI_CHEAT.md class 28: the previous output returned at once on the calls it hopes are not checked; the
    harness checks every timed output itself, so there is no unchecked call to hide in."""
    cache = {}

    def lazy(x):
        if "y" not in cache:
            cache["y"] = torch.relu(x)
        return cache["y"]

    def serve(client, ch):
        for _ in range(4):
            client.bracket("candidate", lazy)

    got = _session(tmp_path, serve)
    assert got.problems and "differ from the answer" in got.problems[0]


def test_on_cpu_the_calls_of_the_bracket_whose_time_is_reported_go_to_the_full_check(tmp_path):
    """cpu reports the least bracket: one bracket of calls approximate to within the loose 1% (and faster) would
    set the time alone while the reservoir's few picks miss it. Its calls are the ones the judge checks in full
    (``Clocked.fastest``); with no reservoir at all (keep=0) they are still there."""
    for attempt in range(3):  # a host so loaded that the cheap bracket waited longer than its work is tried again
        brackets = []

        def serve(client, ch):
            for i in range(5):
                cheap = i == 3
                brackets.append(cheap)

                def fn(x, cheap=cheap):
                    if cheap:  # 0.3% off: inside the loose check, outside any full budget, and fast
                        return torch.relu(x) * 1.003
                    time.sleep(0.004)
                    return torch.relu(x)
                if client.bracket("candidate", fn) == "enough":
                    break

        (tmp_path / str(attempt)).mkdir()
        got = _session(tmp_path / str(attempt), serve, keep=0)
        assert not got.problems and not got.kept  # the loose check passes it and nothing was sampled
        assert got.fastest, "the fastest bracket's calls were not kept for the full check"
        most = max(b.calls for b in got.brackets)
        least = min((b for b in got.brackets if b.calls == most), key=lambda b: b.seconds)
        if brackets[got.brackets.index(least)]:  # by the harness's clock the cheap bracket was the fastest...
            break
    # ...and its calls, not the others', are the ones kept for the full check
    assert brackets[got.brackets.index(least)], "the cheap bracket was never the fastest in three tries"
    assert all(not torch.equal(out[0], torch.relu(inp[0])) for inp, out in got.fastest)  # the cheap bracket's


def test_on_cpu_an_honest_servers_fastest_bracket_is_kept_and_right(tmp_path):
    def serve(client, ch):
        for _ in range(4):
            if client.bracket("candidate", torch.relu) == "enough":
                break

    got = _session(tmp_path, serve, keep=0)
    assert got.fastest and all(torch.equal(out[0], torch.relu(inp[0])) for inp, out in got.fastest)


def test_a_server_that_answers_done_without_the_work_has_wrong_outputs(tmp_path):
    """The clock stops at the server's answer, so an early answer is fast: but the outputs are read then."""
    def serve(client, ch):
        reply = ch.ask({"op": "bracket", "label": "candidate"})
        ch.ask({"op": "armed"})
        ch.ask({"op": "finished", "error": ""})  # nothing computed, nothing copied
        assert reply["calls"] == 1

    got = _session(tmp_path, serve)
    assert got.problems and "differ from the answer" in got.problems[0]


def test_outputs_written_after_done_are_seen(tmp_path):
    """docs/ANTI_CHEAT.md C09 across the boundary: work finished after the server said done (a thread it left
    running) lands in the pool after the harness's snapshot; the harness compares the pool with the snapshot
    again."""
    def serve(client, ch):
        client.bracket("candidate", torch.relu)
        pool, _ = client._map({"file": str(tmp_path / "harness_pool.bin"), "bytes": 0})
        pool[256:] = 7  # a late write over the pool's input and output sets (after the flag words)

    got = _session(tmp_path, serve)
    assert any("written after" in p for p in got.problems)


def test_the_servers_own_clock_changes_nothing(tmp_path, monkeypatch):
    """The server's process may make its clocks run 1000x slow or fast: the harness does not ask them."""
    import verifier.child.harness_client as hc

    def serve(client, ch):
        monkeypatch.setattr(hc, "torch", hc.torch)  # the server's module state is its own to change
        for _ in range(3):
            client.bracket("candidate", lambda x: (time.sleep(0.002), torch.relu(x))[1])

    got = _session(tmp_path, serve)
    # a 2 ms call is 2 ms by the harness's clock, whatever the server thinks of it
    assert got.per_call_s("candidate") >= 0.0015 and not got.problems


def test_the_null_bracket_is_linear_in_its_calls():
    assert null_for({1: 1.0, 9: 5.0}, 5) == pytest.approx(3.0)
    assert null_for({1: 1.0, 9: 5.0}, 9) == 5.0 and null_for({}, 4) == 0.0


def test_a_server_that_never_answers_does_not_hang_the_harness(tmp_path):
    """A child that dies mid-bracket: the driver's thread ends with the job, the harness's result stands."""
    done = threading.Event()

    def serve(client, ch):
        ch.ask({"op": "bracket", "label": "candidate"})
        done.set()  # and then nothing: the channel closes

    got = _session(tmp_path, serve)
    assert done.is_set() and not got.brackets


def test_the_harness_caps_a_models_brackets_whatever_the_server_asks(tmp_path):
    """How long a model is timed is the harness's decision: a server that keeps asking is told "enough" after its
    probe and the configured brackets (a real relu on a shared host is rarely tight to 1% in three brackets)."""
    answers = []

    def serve(client, ch):
        answers.extend(client.bracket("candidate", torch.relu) for _ in range(30))

    got = _session(tmp_path, serve, keep=1, brackets=4)
    assert 1 + 3 <= len(got.brackets) <= 1 + 4 and answers.count("enough") == 30 - len(got.brackets)
    assert answers[:len(got.brackets)] == ["done"] * len(got.brackets)


def _with(host_clock: bool, label: str, calls: int, seconds: list[float]) -> Harness:
    h = Harness("cpu", ".", torch.nn.ReLU, _draw, check=False, brackets=10)
    h.result.host_clock = host_clock
    h.result.brackets = [Bracket(label, 1, seconds[0])] + [Bracket(label, calls, s) for s in seconds[1:]]
    return h


def test_a_model_whose_time_is_tight_stops_after_three_brackets_not_before():
    steady = [1e-3, 8e-3, 8.01e-3, 7.99e-3]  # the probe, then three brackets of 8 calls within 0.25%
    assert _with(True, "candidate", 8, steady[:3])._enough("candidate") is False  # two brackets: too few
    assert _with(True, "candidate", 8, steady)._enough("candidate") is True
    assert _with(False, "reference", 8, steady)._enough("reference") is True  # cuda: the median's interval
    noisy = [1e-3, 8e-3, 9e-3, 8.5e-3, 10e-3]
    assert _with(True, "candidate", 8, noisy)._enough("candidate") is False  # 95% interval wider than 1%
    assert _with(True, "candidate", 8, noisy + [8e-3] * 6)._enough("candidate") is True  # the cap: 10 after the probe
    # the null bracket is timed at both counts for its fixed part and its part per call: one count known is not enough
    assert _with(True, "null", 8, steady)._enough("null") is False


def test_the_null_bracket_stops_once_both_its_counts_are_known_well_enough():
    """The null (the reference child's fixed-output bracket, subtracted from every model's bracket of the same
    calls) stops once each of its counts has LEAST_BRACKETS brackets within 1% of its time, within NULL_SLACK_S or
    within NULL_SHARE of its one-call time: a few microseconds of it spread over a bracket's calls are below any
    model's 1%, and a busy device's spread is inside the resolution every time per call carries. It ran its full 21 brackets
    before, 9.8 of the 47 s that 19 tasks' reference timings held the device alone on one H200 (6bb94ce)."""
    from verifier.execute.harness import NULL_SLACK_S

    def null(ones: list[float], mosts: list[float], host_clock: bool = False) -> Harness:
        h = Harness("cpu", ".", torch.nn.ReLU, _draw, check=False, brackets=10)
        h.result.host_clock = host_clock
        h.result.brackets = [Bracket("null", 1, s) for s in ones] + [Bracket("null", 64, s) for s in mosts]
        return h

    jitter = NULL_SLACK_S / 4
    assert null([3e-5, 3e-5 + jitter, 3e-5 - jitter], [4e-4, 4.01e-4, 3.99e-4])._enough("null") is True
    assert null([3e-5, 3e-5 + jitter], [4e-4, 4.01e-4, 3.99e-4])._enough("null") is False  # two of one count
    assert null([3e-5] * 3, [])._enough("null") is False  # one count only
    wide = [3e-5, 3e-5 + 6 * NULL_SLACK_S, 3e-5 - NULL_SLACK_S, 3e-5 + 5 * NULL_SLACK_S]
    assert null(wide, [4e-4] * 3)._enough("null") is False  # its interval wider than the slack and than 1%
    assert null([3e-5] * 3, [4e-4, 4.4e-4, 3.6e-4, 4.2e-4])._enough("null") is False  # 10% at the most calls
    assert null([3e-5] * 3, [4e-4] * 3, host_clock=True)._enough("null") is True
    # on a host clock the null is never subtracted: three of each count, however spread
    assert null(wide, [4e-4, 4.4e-4, 3.6e-4], host_clock=True)._enough("null") is True
    assert null(wide, [4e-4, 4.4e-4], host_clock=True)._enough("null") is False
    # a busy device: the null's fixed part is hundreds of microseconds and spreads by tens between brackets, which a
    # time per call's resolution (NULL_SHIFT one-call nulls over its calls) already allows for: known to NULL_SHARE of
    # the one-call null is enough, further spread is not
    from verifier.execute.harness import NULL_SHARE
    busy, ones = 5e-4, [5e-4, 5.6e-4, 4.4e-4]
    assert null(ones, [9e-4, 9.8e-4, 8.2e-4])._enough("null") is True
    spread = 1.2 * NULL_SHARE * busy  # half the interval over the share at the most calls
    assert null(ones, [9e-4, 9e-4 + 2 * spread, 9e-4 - 2 * spread, 9e-4 + spread])._enough("null") is False
    assert null([busy, busy + 2 * spread, busy - 2 * spread], [9e-4] * 3)._enough("null") is False  # and at one call
    # a model's brackets never count towards the null's
    h = null([3e-5] * 3, [4e-4] * 2)
    h.result.brackets += [Bracket("reference", 64, 4e-4)] * 5
    assert h._enough("null") is False


def test_a_label_that_comes_late_gets_fewer_calls_and_its_brackets_in_time_are_its_time():
    """A forward of many kernels fills the device's launch queue (about a thousand launches) while the gate holds the
    stream: its child cannot queue a bracket's calls before the gate opens, and the bracket comes late (a level-3
    network on one H200: ten of eleven brackets late, 2 s each, for the reference and its torch.compile). The harness
    gives that label CALLS_CUT times fewer calls after each late bracket (never a label hinted to wait on the host:
    late by its nature), and its time is that of its brackets in time, not of the late ones of more calls."""
    from verifier.execute.harness import CALLS_CUT

    h = Harness("cpu", ".", torch.nn.ReLU, _draw, check=False, brackets=10)
    h._layout, h._probe_s["reference"] = {"most": 256}, 1e-4  # 200 calls for the 20 ms a bracket aims at
    assert h._calls_for("reference") == 200
    h._came("reference", 200, late=False, hinted=False)
    assert h._calls_for("reference") == 200
    h._came("reference", 200, late=True, hinted=False)
    assert h._calls_for("reference") == 200 // CALLS_CUT and h._calls_for("compiled") == 1  # (no probe yet: one)
    h._came("reference", 50, late=True, hinted=False)  # (a late run's short wait too: still late, still cut)
    assert h._calls_for("reference") == 50 // CALLS_CUT
    h._came("reference", 12, late=True, hinted=True)  # a forward that waits on the host: no cut
    assert h._calls_for("reference") == 12
    for calls in (12, 3, 1):
        h._came("reference", calls, late=True, hinted=False)
    assert h._calls_for("reference") == 1  # never below one call
    # its time: the brackets in time of the most calls that number three, not the late ones of more calls
    c = h.result
    c.brackets = [Bracket("reference", 1, 1e-3), Bracket("reference", 14, 0.5, late=True)] + \
        [Bracket("reference", 3, s) for s in (3e-3, 3.01e-3, 2.99e-3)]
    assert c.samples("reference") == pytest.approx([1e-3, 3.01e-3 / 3, 2.99e-3 / 3])
    # all late after the cuts: the most calls that number three, not the single late bracket of the most
    c.brackets = [Bracket("reference", 1, 1e-3, late=True), Bracket("reference", 14, 0.5, late=True)] + \
        [Bracket("reference", 3, s, late=True) for s in (4e-3, 4.1e-3, 3.9e-3)]
    assert c.samples("reference") == pytest.approx([4e-3 / 3, 4.1e-3 / 3, 3.9e-3 / 3])
    # fewer than three of every count: as before, the most calls, in time unless all came late
    c.brackets = [Bracket("reference", 1, 1e-3), Bracket("reference", 14, 0.5, late=True),
                  Bracket("reference", 14, 0.6, late=True)]
    assert c.samples("reference") == pytest.approx([0.5 / 14, 0.6 / 14])


def test_the_interval_of_a_time_and_of_a_speedup():
    assert tight([1.0, 1.001, 0.999], least=False) and not tight([1.0, 1.001], least=False)
    assert not tight([1.0, 1.2, 0.9, 1.1], least=True)
    assert tight([1.0, 1.5, 1.001, 1.002, 1.0, 0.999, 1.001, 1.0, 1.003], least=False)  # one outlier: the median holds
    # the stopping rule's exact percentiles are the drawn bootstrap's, where no percentile is near a step
    five = [1.0, 1.3, 1.1, 0.9, 1.2]
    assert order_interval(five, least=True) == interval(five, min) == (0.9, 1.1)
    assert order_interval(five, least=False) == interval(five, statistics.median) == (0.9, 1.3)
    lo, hi = interval([1.0, 1.01, 0.99, 1.0, 1.02], min, over=[2.0, 2.02, 1.98, 2.01, 2.0])
    assert 1.9 < lo <= 2.0 / 0.99 <= hi < 2.1
    lo, hi = interval([1.0, 1.5, 0.6, 1.2], statistics.median, over=[1.0, 1.4, 0.7, 1.1])
    assert lo < 1.0 < hi
    assert interval([1.0], min) is None and interval([1.0, 1.0], min, over=[2.0]) is None


@pytest.mark.parametrize("holds", [True, False])
def test_the_harness_sees_whether_the_brackets_ran_under_the_device_lock(tmp_path, holds):
    """The child takes the device lock exclusive for its timing phase (verifier/common/devlock.py); the harness looks at
    the lock itself before each bracket, so a timing that ran beside other device work is known on the trusted
    side, whatever the child's report says."""
    from verifier.common.devlock import device_lock

    path = str(tmp_path / "device.lock")

    def serve(client, ch):
        with device_lock(path) as lock:
            if holds:
                assert lock.acquire(True, 5.0)
            for _ in range(3):
                client.bracket("candidate", torch.relu)

    got = _session(tmp_path, serve, lock_path=path)
    assert len(got.brackets) == 3 and got.unlocked == (0 if holds else 3)


# ---- the timed outputs' checks held until the child has ended (cuda's DEFER_BYTES), here on cpu

_LIES = [test_an_honest_server_is_clocked_checked_and_sampled_by_the_harness,
         test_a_server_that_skips_work_on_some_timed_calls_is_seen_on_every_call,
         test_on_cpu_the_calls_of_the_bracket_whose_time_is_reported_go_to_the_full_check,
         test_a_server_that_answers_done_without_the_work_has_wrong_outputs,
         test_outputs_written_after_done_are_seen]


@pytest.mark.parametrize("case", _LIES, ids=lambda f: f.__name__[5:45])
@pytest.mark.parametrize("room", [1 << 30, 40_000])  # every bracket held; some held, the rest checked at once
def test_checks_held_until_the_child_ended_decide_as_checks_at_once(tmp_path, monkeypatch, case, room):
    # on cuda the harness checks the timed outputs after the child has let the device go: a server that skips work,
    # answers done early or writes late is caught the same, and an honest one's picks are right
    from verifier.execute import timed_checks

    monkeypatch.setitem(timed_checks.DEFER_BYTES, "cpu", room)
    case(tmp_path)


def test_held_checks_run_only_once_the_child_has_ended_and_every_call_is_checked(tmp_path, monkeypatch):
    from verifier.execute import timed_checks

    from verifier.common.devlock import DeviceLock

    monkeypatch.setitem(timed_checks.DEFER_BYTES, "cpu", 1 << 30)
    lock_path = str(tmp_path / "dev.lock")
    h = Harness("cpu", tmp_path, torch.nn.ReLU, _draw, check=True, keep=3, budget_s=5.0, lock_path=lock_path,
                lock_wait_s=2.0)
    d = Driver(tmp_path, n_trials=0, n_timing=0, on_bracket=h.serve)
    ch = Channel(tmp_path)
    try:
        for _ in range(4):
            BracketClient(ch, "cpu").bracket("candidate", torch.relu)
    finally:
        ch.close()
        assert not d.close().harness_error
    assert h.result.calls_seen == 0 and not h.result.kept  # nothing checked while the child ran
    # the held checks are the verifier's device work: under the device lock, shared, so no timing runs beside them
    timer, alone = DeviceLock(lock_path), []
    check = h._check
    monkeypatch.setattr(h, "_check", lambda *a: (alone.append(timer.acquire(True, 0.05)), timer.release(),
                                                  check(*a)))
    got = h.close()
    timer.close()
    assert alone and not any(alone)
    assert got.calls_seen == sum(b.calls for b in got.brackets) >= 4 and len(got.kept) == 3 and not got.problems


def test_a_held_check_that_fails_on_the_harness_side_is_the_verifiers_error(tmp_path, monkeypatch):
    from verifier.execute import timed_checks

    monkeypatch.setitem(timed_checks.DEFER_BYTES, "cpu", 1 << 30)
    models = []

    def reference():
        m = torch.nn.ReLU()
        models.append(m)
        return m

    h = Harness("cpu", tmp_path, reference, _draw, check=True, keep=3, budget_s=5.0)
    d = Driver(tmp_path, n_trials=0, n_timing=0, on_bracket=h.serve)
    ch = Channel(tmp_path)
    try:
        BracketClient(ch, "cpu").bracket("candidate", torch.relu)
        models[0].forward = lambda x: (_ for _ in ()).throw(MemoryError("out of memory (the harness's)"))
    finally:
        ch.close()
        d.close()
    got = h.close()
    assert "MemoryError" in got.error and not got.problems  # never a problem of the candidate's outputs


def test_a_host_waits_hint_shortens_only_the_hinted_labels_wait_and_an_in_time_bracket_takes_it_back(tmp_path):
    """The child's hint that its forward waits on the host (verifier/child/timing.py ``forward_waits_on_host``) opens
    that label's gates after LATE_QUEUE_WAIT_S from its first bracket; a bracket of the label that then comes in
    time takes the hint back for the rest of the job (a false hint cannot keep a model on short waits that its own
    queueing would make late, nor make another label's brackets late)."""
    from verifier.execute.harness import LATE_QUEUE_WAIT_S, QUEUE_WAIT_S

    h = Harness("cuda", tmp_path, torch.nn.ReLU, _draw, check=False)  # the waits' logic only: no device touched
    assert h.queue_wait_s("candidate") == QUEUE_WAIT_S
    h._hint("candidate", False)
    assert h.queue_wait_s("candidate") == QUEUE_WAIT_S and not h.result.host_waits
    h._hint("candidate", True)
    assert h.queue_wait_s("candidate") == LATE_QUEUE_WAIT_S and h.queue_wait_s("null") == QUEUE_WAIT_S
    h._hint("candidate", True, late=True)  # late as hinted: the hint stands
    assert h.queue_wait_s("candidate") == LATE_QUEUE_WAIT_S
    h._hint("candidate", True, late=False)  # queued in time: not a forward that waits on the host
    assert h.queue_wait_s("candidate") == QUEUE_WAIT_S
    h._hint("candidate", True)  # asked again: taken back for the job
    assert h.queue_wait_s("candidate") == QUEUE_WAIT_S
    assert h.result.host_waits == ["candidate"] and h.result.host_waits_taken_back == ["candidate"]


def test_the_channel_hands_the_harness_a_host_waits_hint_only_when_it_is_true(tmp_path):
    """The hint reaches ``on_bracket`` as a bool: True only for a message's JSON true (a string or a number a child
    sends is no hint)."""
    seen = []

    def on_bracket(label, send, recv, host_waits):
        seen.append((label, host_waits))
        send({"enough": True})

    d = Driver(tmp_path, n_trials=0, n_timing=0, on_bracket=on_bracket)
    ch = Channel(tmp_path)
    try:
        assert BracketClient(ch, "cpu").bracket("candidate", torch.relu, True) == "enough"
        assert BracketClient(ch, "cpu").bracket("candidate", torch.relu) == "enough"
        assert BracketClient(ch, "cpu").bracket("null", torch.relu, False) == "enough"
        for raw in ("yes", 1, None):
            assert ch.ask({"op": "bracket", "label": "raw", "host_waits": raw}).get("enough")
    finally:
        ch.close()
        assert not d.close().harness_error
    assert seen == [("candidate", True), ("candidate", False), ("null", False)] + [("raw", False)] * 3


def test_a_timing_failure_the_report_claims_does_not_skip_the_harnesss_checks(tmp_path):
    """docs/ANTI_CHEAT.md class 50: the child's report is written in the candidate's process; a timing failure claimed
    there (``timing_error`` set by native code) once skipped the judge's checks of every output the harness clocked,
    so a server that skipped work on its timed calls passed. The harness's own evidence is checked whenever it
    clocked the candidate; a claimed failure only withholds the speedup. The honest twin: a timing that failed
    with right outputs is no cheat, and says why it was not timed."""
    from verifier import cheats
    from verifier.common.config import VerifyConfig
    from verifier.common.contract import ChildReport
    from verifier.judge.outputs import Evidence
    from verifier.judge.verdict import Work, _timing_outcome
    from kernelmill.schema import Verdict
    from types import SimpleNamespace

    cache = {}

    def lazy(x):
        if "y" not in cache:
            cache["y"] = torch.relu(x)
        return cache["y"]

    def judged(fn):
        got = _session(tmp_path, lambda client, ch: [client.bracket("candidate", fn) for _ in range(4)])
        w = Work(verdict=Verdict(candidate_id="c"))
        report = ChildReport(kind="candidate", timing_error="Traceback ...\nRuntimeError: the warm-up failed")
        ev = Evidence()
        ex = SimpleNamespace(clocked=got, give_way=lambda: None)
        plan = SimpleNamespace(pooled=[], ref_mod=None, selects=False)  # the judge's full check of the harness's picks: relu
        return w, _timing_outcome(w, plan, ex, report, None, torch.nn.ReLU(), None, [], VerifyConfig(), ev), ev

    w, v, ev = judged(lazy)
    assert v is not None and v.status == "cheat" and cheats.C16 in v.cheats, (v and v.status, ev.details)
    w, v, ev = judged(torch.relu)
    assert v is None and w.verdict.speedup_eager is None and any("Timing failed" in d for d in ev.details), ev.details


def test_a_null_bracket_draws_one_input_set_and_copies_it_to_its_other_calls(tmp_path, monkeypatch):
    """The null model answers with a fixed output whatever its inputs, so its many-call brackets need the bytes of a
    model's inputs, not fresh draws (each a task's get_inputs on the host, under the RNG lock, while the device is
    held alone): one draw per bracket, copied into separate memory for each further call. A model's brackets still
    draw every call's inputs."""
    drawn = []

    def draw(seed: int) -> list:
        drawn.append(seed)
        return _draw(seed)

    template = torch.zeros(32, 128)
    seen = []

    def serve(client, ch):
        for _ in range(4):
            client.bracket("null", lambda x: (seen.append(x.clone()), template)[1])

    (tmp_path / "null").mkdir()
    got = _session(tmp_path / "null", serve, check=False, keep=0, draw=draw)
    calls = [b.calls for b in got.brackets if b.label == "null"]
    assert len(calls) == 4 and max(calls) > 1, calls  # the null is timed at one call and at the most a bracket holds
    assert len(drawn) == 1 + len(calls), (len(drawn), calls)  # the layout's draw, then one a bracket
    assert len(seen) == sum(calls)
    many = seen[calls[0]:calls[0] + calls[1]]  # the second bracket's calls: the one draw's values in each
    assert all(torch.equal(x, many[0]) for x in many)

    # a model's bracket of as many calls draws each of them (brackets of about a second after the probe: on a host
    # loaded enough that the probe's round trip takes 20 ms, one of 20 ms would hold one call)
    drawn.clear()
    import verifier.execute.harness as harness_mod
    monkeypatch.setitem(harness_mod.TARGET_S, "cpu", 1.0)

    def serve_model(client, ch):
        for _ in range(2):
            client.bracket("candidate", torch.relu)

    (tmp_path / "model").mkdir()
    model_calls = [b.calls for b in _session(tmp_path / "model", serve_model, check=False, keep=0, draw=draw).brackets]
    assert len(drawn) == 1 + sum(model_calls) and model_calls[1] > 1, (len(drawn), model_calls)


def test_a_draw_that_waits_for_the_rng_lock_says_so_apart_from_the_draw(tmp_path):
    """The harness draws its private inputs under the process's RNG lock (the global generator, which a task's plan
    and a reference's construction seed too), inside the timer's hold: a wait for that lock is the harness's own
    part of the brackets' seconds (``draw_lock_wait``, apart from ``draw``), so a batch's report can tell a hold
    stretched by another job's host work from the draws themselves."""
    lock = threading.RLock()
    held = threading.Event()

    def holder():
        with lock:
            held.set()
            time.sleep(0.4)

    def serve(client, ch):
        t = threading.Thread(target=holder)
        t.start()
        held.wait(5)
        try:
            client.bracket("candidate", torch.relu)
        finally:
            t.join()

    got = _session(tmp_path, serve, check=False, keep=0, rng_lock=lock)
    assert got.serve_s["draw_lock_wait"] >= 0.3, got.serve_s
    assert got.serve_s["draw"] < 0.3, got.serve_s  # the draws themselves: a 32 x 128 tensor


@pytest.mark.parametrize("fails_at", ["clock", "snapshot"])
def test_a_harness_failing_mid_bracket_is_the_verifiers_failure_never_a_request_out_of_turn(tmp_path, monkeypatch,
                                                                                           fails_at):
    """The harness's own failure inside a bracket (its copy of the timed outputs out of device memory on a full
    card) left the child's next bracket message ("armed", "finished") to the channel's main loop, which recorded it
    as a request out of turn: an honest kernel's verdict became a C12 cheat (kbleaderboard-l1-p5 gemini on an
    H100 whose memory other jobs had filled). Its bracket messages after the failure are refused, not recorded;
    a request for a seed out of turn still is."""
    import verifier.execute.harness as harness_mod

    def oom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 MiB (the harness's own copy)")

    if fails_at == "clock":
        monkeypatch.setattr(Harness, "_write_inputs", oom)
    else:
        monkeypatch.setattr(harness_mod, "_snapshot", oom)
    h = Harness("cpu", tmp_path, torch.nn.ReLU, _draw, check=True, keep=3, budget_s=5.0)
    d = Driver(tmp_path, n_trials=0, n_timing=0, on_bracket=h.serve)
    ch = Channel(tmp_path)
    client = BracketClient(ch, "cpu")
    try:
        with pytest.raises((ConnectionRefusedError, RuntimeError)):
            client.bracket("candidate", torch.relu)
        with pytest.raises(ConnectionRefusedError):  # the child's code asking for the next bracket
            client.bracket("candidate", torch.relu)
        with pytest.raises(ConnectionRefusedError):  # a seed asked for out of turn is still the candidate's
            ch.ask({"op": "trial", "i": 7})
    finally:
        ch.close()
        ledger = d.close()
    assert "OutOfMemoryError" in ledger.harness_error, ledger.harness_error
    assert len(ledger.problems) == 1 and '"op": "trial"' in ledger.problems[0], ledger.problems
    ev = Evidence()  # the judge's reading: C12 for the seed asked out of turn only
    check_channel(ledger, ev)
    assert ev.codes == {cheats.C12} and '"op": "trial"' in ev.details[0], ev.details
    ledger.problems.clear()
    ev = Evidence()  # the harness's failure alone says nothing of the candidate
    check_channel(ledger, ev)
    assert cheats.C12 not in ev.codes
