"""The verifier's own failures while executing a candidate (verifier/engine.py ``execute_item``, judge/verdict.py):
each is that candidate's verifier_error, never a verdict on its code; one a wait may cure (the execution process's
set-up, the timing harness, the judge's or the plan's device work out of memory) is run again, first alone (in a batch
once no other candidate is ready), then after the waits; and a verifier_error names the verifier's line that raised it.
What the candidate's own process claims or does (a set-up failure after its code ran, a device fault its kernels left)
stays its own verdict."""

from __future__ import annotations


import torch

from bench.lib import fixtures as fx
from kernelmill.schema import Task
from verifier import screen
from verifier.engine import VerifyConfig

TASK = Task.from_code(fx.RELU_TASK.replace("torch.randn(64, 1000)", "torch.randn(40, 700)") + "\n# set-up failures\n",
                      name="setup_failures_relu", source="seed", level=1)


def test_an_execution_process_that_failed_before_the_candidate_ran_is_run_again(monkeypatch, tmp_path):
    """The set-up failure (Work.setup_failed: the device's warm-up or the verifier's set-up, out of device memory that
    other processes held) is the verifier's: the engine runs the job again after a wait, and only a failure that stays
    is the verifier_error it says. Exercised here with the job's outcome given (a real one needs a full device)."""
    from verifier import engine
    from verifier.judge.verdict import finish

    calls = []

    def execute(fails: int):
        def run(w, backend, cfg, build_root):
            calls.append((w.verdict.candidate_id, w.alone))
            if len(calls) <= fails:
                w.setup_failed = True
                return finish(w, "verifier_error", ["The execution process failed before your code ran:",
                                                    f"CUDA error: out of memory (run {len(calls)})"])
            w.verdict.correct = True
            return finish(w, "pass", [])
        return run

    monkeypatch.setattr(engine, "SETUP_RETRY_S", (0.0, 0.0))
    cfg = VerifyConfig(build_dir=str(tmp_path))
    w = screen.front(TASK.reference_code, fx.HONEST_RELU, "cpu", TASK.task_id, "again")
    monkeypatch.setattr(engine, "_execute", execute(1))
    v = engine.execute_item(w, [], cfg, tmp_path).verdict
    assert (v.status, v.versions.get("setup_retries"), len(calls)) == ("pass", 1, 2)
    # the run again had the memory gate to itself; what the first run failed on is kept on the verdict
    assert [alone for _, alone in calls] == [False, True] and v.versions.get("memory_alone") is True
    assert v.versions["setup_failures"] == ["The execution process failed before your code ran: | CUDA error: out of "
                                            "memory (run 1)"]
    assert w.verdict.status in ("", None)  # each attempt judged a copy: the first one's verdict left nothing behind
    calls.clear()
    monkeypatch.setattr(engine, "_execute", execute(5))
    v = engine.execute_item(screen.front(TASK.reference_code, fx.HONEST_RELU, "cpu", TASK.task_id, "stays"), [],
                            cfg, tmp_path).verdict
    assert (v.status, v.versions.get("setup_retries"), len(calls)) == ("verifier_error", 2, 3)
    assert "before your code ran" in v.feedback and len(v.versions["setup_failures"]) == 2


def test_in_a_batch_a_set_up_failure_waits_in_the_queue_for_its_run_alone(monkeypatch, tmp_path):
    """In a batch (verify_batch sets ``Work.retry_later``) a job whose first attempt failed on the verifier's side
    is handed back, unjudged, for its run alone (``Work.requeued``) instead of running alone at once: a run alone holds
    every other slot's next candidate back until the jobs beside it end (one H100's real batch at 048b0da: three such
    runs held the candidates behind them 22-57 s each at memory admission). The slot takes the other candidates
    first; the job's run alone comes once no other is ready, and its verdict keeps what the first attempt failed on.
    Red team: the hand-back is the verifier's own bookkeeping; a job that fails alone as well still ends as the
    verifier_error it says after the waits, never a verdict of the candidate's."""
    from verifier import engine
    from verifier.entry import verify
    from verifier.judge.verdict import finish

    calls: list = []
    fail_ids = {"bad": 1}

    def run(w, backend, cfg, build_root):
        cid = w.verdict.candidate_id
        calls.append((cid, w.alone))
        if fail_ids.get(cid, 0) > 0:
            fail_ids[cid] -= 1
            w.setup_failed = True
            return finish(w, "verifier_error", ["The execution process failed before your code ran:",
                                                "CUDA error: out of memory"])
        w.verdict.correct = True
        return finish(w, "pass", [])

    monkeypatch.setattr(engine, "SETUP_RETRY_S", (0.0, 0.0))
    monkeypatch.setattr(engine, "_execute", run)
    cfg = VerifyConfig(build_dir=str(tmp_path), exec_workers=1, time_torch_compile=False)
    # one candidate's own call: no queue to hand it back to, run alone at once (as before)
    w = screen.front(TASK.reference_code, fx.HONEST_RELU, "cpu", TASK.task_id, "bad")
    fail_ids["bad"] = 1
    v = engine.execute_item(w, [], cfg, tmp_path).verdict
    assert v.status == "pass" and [c for c in calls] == [("bad", False), ("bad", True)], calls
    # handed back where the caller holds it: unjudged, marked alone, its failure kept; the next call runs it alone
    calls.clear()
    fail_ids["bad"] = 1
    w = screen.front(TASK.reference_code, fx.HONEST_RELU, "cpu", TASK.task_id, "bad")
    w.retry_later = True
    back = engine.execute_item(w, [], cfg, tmp_path)
    assert back.requeued and back.alone and not back.verdict.status and len(back.setup_failures) == 1, back.verdict
    v = engine.execute_item(back, [], cfg, tmp_path).verdict
    assert v.status == "pass" and v.versions["setup_retries"] == 1 and v.versions.get("memory_alone") is True
    assert calls == [("bad", False), ("bad", True)] and "out of memory" in v.versions["setup_failures"][0]
    # a batch: one slot; the failed job's run alone comes after every other candidate's
    calls.clear()
    fail_ids["bad"] = 1
    codes = [fx.HONEST_RELU + f"\n# variant {k}\n" for k in range(3)]
    tasks = [TASK] * 4
    from kernelmill.schema import Candidate

    cands = [Candidate(candidate_id=cid, task_id=TASK.task_id, code=code, backend="cpu", generator="test")
             for cid, code in zip(("bad", "c1", "c2", "c3"), [fx.HONEST_RELU] + codes)]
    vs = verify(list(zip(tasks, cands)), config=cfg)
    assert [v.status for v in vs] == ["pass"] * 4, [(v.candidate_id, v.status, v.feedback) for v in vs]
    assert calls.count(("bad", False)) == 1 and calls[-1] == ("bad", True), calls
    assert sorted(c for c, _ in calls if c != "bad") == ["c1", "c2", "c3"], calls
    assert vs[0].versions["setup_retries"] == 1 and vs[0].versions.get("memory_alone") is True
    assert all("setup_retries" not in v.versions for v in vs[1:])
    # one that fails alone too ends as the verifier_error it says, after the waits
    calls.clear()
    fail_ids["bad"] = 9
    vs = verify(list(zip(tasks[:2], cands[:2])), config=cfg)
    assert vs[0].status == "verifier_error" and "before your code ran" in vs[0].feedback, vs[0].feedback
    assert vs[0].versions["setup_retries"] == 2 and vs[1].status == "pass"
    assert [a for c, a in calls if c == "bad"] == [False, True, True], calls


def test_a_set_up_failure_is_first_run_again_at_once_alone_and_only_then_waits(monkeypatch, tmp_path):
    """A set-up failure beside other jobs (the device's warm-up, the harness's allocation: any of Work.setup_failed's
    causes) is first run again at once with the memory gate to itself, no wait spent (one H100's real batch at
    b1f71d4: its last candidate waited 85 s on fixed waits with the device idle); only one that fails alone too waits
    for other processes, and the waits it spends are the engine's."""
    import time

    from verifier import engine
    from verifier.judge.verdict import finish

    calls, slept = [], []

    def execute(fails: int):
        def run(w, backend, cfg, build_root):
            calls.append(w.alone)
            if len(calls) <= fails:
                w.setup_failed = True
                return finish(w, "verifier_error", ["The execution process failed to initialise the device before "
                                                    "your code ran:", "CUDA error: out of memory"])
            w.verdict.correct = True
            return finish(w, "pass", [])
        return run

    monkeypatch.setattr(engine, "SETUP_RETRY_S", (30.0, 40.0, 50.0))
    monkeypatch.setattr(engine.time, "sleep", slept.append)
    cfg = VerifyConfig(build_dir=str(tmp_path))
    for fails, waits in ((1, []), (2, [40.0]), (3, [40.0, 50.0])):
        calls.clear(), slept.clear()
        monkeypatch.setattr(engine, "_execute", execute(fails))
        t0 = time.monotonic()
        v = engine.execute_item(screen.front(TASK.reference_code, fx.HONEST_RELU, "cpu", TASK.task_id, f"f{fails}"),
                                [], cfg, tmp_path).verdict
        assert v.status == "pass" and v.versions["setup_retries"] == fails and slept == waits, (fails, slept)
        assert calls == [False] + [True] * fails and time.monotonic() - t0 < 5.0
        assert len(v.versions["setup_failures"]) == fails and v.versions.get("memory_alone") is True


def test_the_verifiers_own_device_work_out_of_memory_is_run_again(monkeypatch, tmp_path):
    """The judge's own device work (its reference, the inputs it draws) out of memory while other processes held
    it (tests/gpu at 3dde888: AcceleratorError "CUDA error: out of memory" in the slot's process, ten verifiers on
    one H200) is run again after the set-up waits, as a set-up failure is; any other exception, or one that stays,
    is the candidate's verifier_error, never its verdict."""
    from verifier import engine
    from verifier.judge.verdict import finish

    calls = []

    def execute(fails: int, error: type = torch.OutOfMemoryError, message: str = "CUDA error: out of memory"):
        def run(w, backend, cfg, build_root):
            calls.append(1)
            if len(calls) <= fails:
                raise error(message)
            w.verdict.correct = True
            return finish(w, "pass", [])
        return run

    monkeypatch.setattr(engine, "SETUP_RETRY_S", (0.0, 0.0))
    cfg = VerifyConfig(build_dir=str(tmp_path))

    def verdict(run):
        calls.clear()
        monkeypatch.setattr(engine, "_execute", run)
        return engine.execute_item(screen.front(TASK.reference_code, fx.HONEST_RELU, "cpu", TASK.task_id, "oom"), [],
                                   cfg, tmp_path).verdict

    v = verdict(execute(2))
    assert (v.status, v.versions.get("setup_retries"), len(calls)) == ("pass", 2, 3)
    v = verdict(execute(5))
    assert (v.status, len(calls)) == ("verifier_error", 3) and "out of memory" in v.feedback
    v = verdict(execute(1, ValueError))  # not the device's memory: not run again
    assert (v.status, len(calls)) == ("verifier_error", 1)
    # the driver's wording of it (torch's expandable segments; one H100's real batch at 048b0da) is run again too
    v = verdict(execute(1, RuntimeError, "cuMemCreate failed: CUDA driver error 2 (CUDA_ERROR_OUT_OF_MEMORY)"))
    assert (v.status, v.versions.get("setup_retries"), len(calls)) == ("pass", 1, 2)
    v = verdict(execute(1, RuntimeError, "cuMemCreate failed: CUDA driver error 1 (CUDA_ERROR_INVALID_VALUE)"))
    assert (v.status, len(calls)) == ("verifier_error", 1)


def test_the_timing_harness_out_of_device_memory_is_run_again_and_decides_no_cheat_away():
    """The harness's own device memory running out mid-timing (one H200's real batch at 7cfab47: an honest pass became
    a verifier_error, 0.26 GiB of the device free) marks the job for the engine's set-up retries, as the judge's own
    out-of-memory does; any other failure of the harness is the verifier_error it says, not run again. Red team: a
    candidate that makes the harness fail (its process filling the device while it is timed) keeps the cheat its
    trials and static scan showed (PyTorch compute in forward, strict policy), not a verifier_error no trainer counts."""
    from types import SimpleNamespace

    from verifier import cheats
    from verifier.common.contract import ChildReport, TrialReport
    from verifier.execute.brackets import Clocked
    from verifier.judge.outputs import Evidence
    from verifier.judge.verdict import _harness_failed, device_memory_line

    oom = "OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total capacity of 139.80 GiB"
    assert device_memory_line(oom) and device_memory_line("AcceleratorError: CUDA error: out of memory")
    assert not device_memory_line("_ChildGone: the child did not queue its bracket: None")
    report = ChildReport(kind="candidate", trials=[TrialReport(index=k, kernel_calls=1) for k in range(3)])

    def judged(error: str, torch_ran: bool):
        w = screen.front(TASK.reference_code, fx.HONEST_RELU, "cpu", TASK.task_id, "harness")
        w.verdict.correct = True
        ev = Evidence()
        if torch_ran:  # the trials' monitors saw PyTorch compute in forward, as the static scan did
            w.torch_findings = ["torch.matmul in forward (PyTorch compute)"]
            ev.torch_codes.add(cheats.C01)
        ex = SimpleNamespace(ledger=SimpleNamespace(harness_error=error), clocked=Clocked(), knockout=None)
        return w, _harness_failed(w, VerifyConfig(legality="strict"), report, ev, ex)

    driver = "RuntimeError: cuMemCreate failed: CUDA driver error 2 (CUDA_ERROR_OUT_OF_MEMORY)"  # (048b0da, H100)
    for error, again in ((oom, True), (driver, True), ("RuntimeError: the reference returns no tensor", False)):
        w, v = judged(error, False)
        assert v.status == "verifier_error" and w.setup_failed is again and "not your kernel" in v.feedback, error
        assert v.cheats == [] and v.pass_strict is None, v
    w, v = judged(oom, True)
    assert v.status == "cheat" and cheats.C01 in v.cheats and not w.setup_failed, (v.status, v.cheats, v.feedback)


def test_a_device_fault_the_reference_raises_after_the_candidates_kernels_is_its_crash():
    """An honest kernel's invalid access leaves the CUDA context broken; the task's reference, run next in the
    candidate's process, raises it ("CUDA error: an illegal memory access was encountered"). That is the candidate's
    crash, as when the fault surfaces in its own forward: not C11 (the reference broken on purpose, class 48), and not
    a verifier_error. A library's own allocation failing (cuBLAS's ALLOC_FAILED) is out of memory: the verifier's,
    run again. A cheat the trials before showed stays the verdict."""
    from verifier import cheats
    from verifier.common.contract import ChildReport, TrialReport
    from verifier.judge.outputs import Evidence
    from verifier.judge.verdict import _reference_failed, memory_error

    assert memory_error("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
    assert not memory_error("RuntimeError: CUDA error: an illegal memory access was encountered")

    def judged(last_line: str, ev: Evidence | None = None, backend: str = "cuda"):
        report = ChildReport(kind="candidate", trials=[TrialReport(index=k, kernel_calls=1) for k in range(2)],
                             reference_error=f"Traceback (most recent call last):\n  ...\n{last_line}\n")
        w = screen.front(TASK.reference_code, fx.HONEST_RELU, "cpu", TASK.task_id, "fault")
        w.verdict.backend = backend
        return w, _reference_failed(w, None, None, report, None, None, ev or Evidence())

    for fault in ("RuntimeError: CUDA error: an illegal memory access was encountered",
                  "torch.AcceleratorError: CUDA error: misaligned address",
                  "RuntimeError: CUDA error: unspecified launch failure"):
        w, v = judged(fault)
        assert v.status == "crash" and v.cheats == [] and not w.setup_failed, (fault, v.status, v.feedback)
        assert "Trial 3" in v.feedback and "compute-sanitizer" in v.feedback and fault.split(": ", 1)[1] in v.feedback
        assert v.reward == 0.1 and v.pass_strict is False
    w, v = judged("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
    assert v.status == "verifier_error" and w.setup_failed and "not your kernel" in v.feedback, v.feedback
    ev = Evidence()
    ev.add(cheats.C08, "trial 2 repeated trial 1's output")
    w, v = judged("RuntimeError: CUDA error: an illegal memory access was encountered", ev)
    assert v.status == "cheat" and v.cheats == [cheats.C08], (v.status, v.cheats)
    # red team: on cpu no kernel leaves a device fault behind; a reference made to raise such a line there is not a
    # crash (it goes on to the class-48 judgement, here a verifier_error: no plan shows the reference runs)
    w, v = judged("RuntimeError: CUDA error: an illegal memory access was encountered", backend="cpu")
    assert v.status != "crash", (v.status, v.feedback)


def test_a_set_up_failure_the_report_claims_after_the_candidates_code_ran_is_its_cheat(tmp_path):
    """A set-up failure is the verifier's (run again, then a verifier_error) only while the job file is still as the
    verifier wrote it: the child removes it right before it imports the candidate, and the candidate cannot write it
    back (it holds the construction seed). Red team: the report, written in the candidate's process, edited to claim
    a set-up failure after the candidate's code ran (its import or constructor caught) is C11, not a verifier_error
    no trainer counts; the honest twin, a set-up that failed before any of its code, stays the verifier's."""
    from types import SimpleNamespace

    from verifier import cheats
    from verifier.common.contract import JOB_FILE, ChildReport, Job
    from verifier.execute.brackets import Clocked
    from verifier.judge.outputs import Evidence
    from verifier.judge.verdict import _report_outcome

    job = Job(kind="candidate", backend="cpu", build_root=str(tmp_path), reference_code=TASK.reference_code,
              init_seed=918273645, candidate_code=fx.HONEST_RELU, n_trials=5)
    job.trial_seeds = [11, 12]  # the verifier's own record, filled in after the job was written: not in the file

    def judged(job_file: str | None):
        job.write(tmp_path)
        if job_file is None:
            (tmp_path / JOB_FILE).unlink()
        elif job_file:
            (tmp_path / JOB_FILE).write_text(job_file)
        ChildReport(kind="candidate", setup_error="Traceback ...\nRuntimeError: CUDA error: out of memory").write(
            tmp_path)
        w = screen.front(TASK.reference_code, fx.HONEST_RELU, "cpu", TASK.task_id, "setup")
        ex = SimpleNamespace(job=job, job_dir=tmp_path, span=(), clocked=Clocked())
        return w, _report_outcome(w, None, ex, Evidence())

    w, v = judged("")  # the file as written: the candidate never ran
    assert v.status == "verifier_error" and w.setup_failed and "before your code ran" in v.feedback, v.feedback
    for forged in (None, '{"kind": "candidate"}'):  # removed (the import came), or written back without the seed
        w, v = judged(forged)
        assert v.status == "cheat" and cheats.C11 in v.cheats and not w.setup_failed, (forged, v.status, v.feedback)


def test_a_failure_of_the_verifiers_own_execution_code_is_a_verifier_error_that_says_where(shared_build_dir):
    """An exception of the verifier's own step while executing a candidate (here the task's reference timing) ends as
    that candidate's verifier_error, never a verdict on its code, and names the verifier's line that raised it (on an
    H200 shared by ten test workers an 'out of memory' of the slot's own process said nothing of the step)."""
    from unittest import mock

    from bench.lib import fixtures as fx
    from verifier import engine
    from verifier.engine import VerifyConfig
    from verifier.entry import verify_candidate

    cfg = VerifyConfig(build_dir=shared_build_dir, time_torch_compile=False, timing_trials=3)
    with mock.patch.object(engine, "eager_timing", side_effect=RuntimeError("the timing's own failure")):
        v = verify_candidate(fx.RELU_TASK, fx.HONEST_RELU, backend="cpu", config=cfg)
    assert v.status == "verifier_error", (v.status, v.feedback)
    assert "RuntimeError: the timing's own failure (raised at verifier/engine.py:" in v.feedback, v.feedback
    assert " _execute)" in v.feedback, v.feedback


def test_a_plan_out_of_device_memory_is_run_again_and_never_kept(monkeypatch, tmp_path):
    """The reference's forward out of device memory while its task is planned (an H100's real batch at cc46f2f: four
    tasks planned at once, their forwards asking 0.1 to 8.8 GiB while other processes held the rest) is the
    verifier's set-up failure, run again after the waits, and the failed plan is not kept: the next ask plans again.
    A task whose forward raises anything else is the task's, never run again."""
    from verifier import engine
    from verifier.judge import plan as plan_mod

    real = plan_mod.reference_outputs
    fails = [1]

    def forward(model, inputs, track=True):
        if fails[0]:
            fails[0] -= 1
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.80 GiB.")
        return real(model, inputs, track)

    monkeypatch.setattr(plan_mod, "reference_outputs", forward)
    cfg = VerifyConfig(build_dir=str(tmp_path))
    code = TASK.reference_code + "\n# planned out of memory once\n"
    w = screen.front(code, fx.HONEST_RELU, "cpu", "oom-plan", "oom-plan")
    v = engine._execute(w, "cpu", cfg, tmp_path)
    assert v.status == "verifier_error" and w.setup_failed, v.feedback
    assert "ran out of device memory while planning" in v.feedback, v.feedback
    plan = engine.task_plan(code, "cpu", cfg, "oom-plan")  # planned again: the failure was not kept
    assert plan.input_bytes > 0 and not plan.skip_reason and not plan.task_fault
    broken = TASK.reference_code.replace("return torch.relu(x)", "raise ValueError('no such op')")
    assert broken != TASK.reference_code
    w = screen.front(broken, fx.HONEST_RELU, "cpu", "broken", "broken")
    v = engine._execute(w, "cpu", cfg, tmp_path)
    assert v.status == "verifier_error" and not w.setup_failed and "does not run" in v.feedback, v.feedback
