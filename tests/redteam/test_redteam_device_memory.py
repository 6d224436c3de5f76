"""Whose device memory ran out. An out-of-memory error in the candidate's process (the verifier's own poison block
before a trial's forward, or the forward itself) is the candidate's crash, unless the device, read in the verifier's
own process after the candidate's process ended, is still too full for the task's job: other processes held it, and
the verdict is the verifier's failure, run again after the set-up waits (``verdict.device_held_by_others``). On one
H100 shared by ten test workers, and in one verifier's real batch on it (c77b706), honest candidates were given a
crash so. Red team: the error line is the candidate's to write, so it never decides alone: a candidate that prints an
out-of-memory line and exits, or fills the device itself and dies, on a device that is free once its process is gone,
keeps its crash."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import torch

from bench.lib import fixtures as fx
from verifier import cheats, screen
from verifier.common.config import VerifyConfig
from verifier.common.contract import ChildReport, Job, TrialReport
from verifier.execute import admission
from verifier.execute.brackets import Clocked
from verifier.execute.channel import Ledger
from verifier.judge.execution import ChildRun, device_memory_line
from verifier.judge.outputs import Evidence
from verifier.judge.trials import check_trials
from verifier.judge.verdict import CONTEXT_MARGIN_BYTES, _process_outcome, device_held_by_others

TASK = fx.RELU_TASK
GIB = 1 << 30
POISON_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity "
              "of 79.18 GiB of which 65.44 MiB is free. Including non-PyTorch memory, this process has 686.00 MiB "
              "memory in use.")
LOG = ("Traceback (most recent call last):\n  File \"verifier/child/worker.py\", line 365, in _run_candidate\n"
       "    backend.poison_free_memory(nbytes(inputs) * 2)\n" + POISON_OOM + "\n")
PLAN = SimpleNamespace(job_bytes=lambda: 512 << 20)


def _work(backend: str = "cuda", name: str = "oom"):
    w = screen.front(TASK, fx.HONEST_RELU, "cpu", "relu", name)
    w.verdict.backend = backend
    return w


def _outcome(tmp_path: Path, free: int, log: str = LOG, backend: str = "cuda", ev: Evidence | None = None,
             alone: bool = True):
    """The process outcome of a child that died without a report, its log ending ``log``, the device reading
    ``free`` bytes free afterwards; ``alone``: the job ran with the memory gate to itself (its second run)."""
    w = _work(backend)
    w.alone = alone
    ex = SimpleNamespace(run=ChildRun(rc=1, timed_out=False, log=log), job=SimpleNamespace(n_trials=5),
                         job_dir=tmp_path, ledger=Ledger(), clocked=Clocked())
    with mock.patch.object(admission, "free_bytes", return_value=free) as read:
        v = _process_outcome(w, VerifyConfig(), PLAN, ex, ev or Evidence())
    return w, v, read


def test_the_error_lines_that_say_the_device_ran_out():
    for line in (POISON_OOM, "RuntimeError: CUDA error: out of memory",
                 "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
                 # the driver's wording (torch's expandable segments), which one H100's real batch met at 048b0da
                 "RuntimeError: cuMemCreate failed: CUDA driver error 2 (CUDA_ERROR_OUT_OF_MEMORY)",
                 "RuntimeError: cudaErrorMemoryAllocation", "RuntimeError: CURAND_STATUS_ALLOCATION_FAILED"):
        assert device_memory_line(line), line
    for line in ("MemoryError", "RuntimeError: std::bad_alloc", "RuntimeError: CUDA error: an illegal memory access "
                 "was encountered", "ValueError: out of range", "RuntimeError: CUDA error: invalid argument",
                 "RuntimeError: cuMemCreate failed: CUDA driver error 1 (CUDA_ERROR_INVALID_VALUE)"):
        assert not device_memory_line(line), line


def test_a_device_other_processes_still_fill_after_the_child_ended_is_the_verifiers_failure(tmp_path):
    """The honest case of the H100: the child died in the verifier's poison block, and after it ended 0.7 GiB of the
    device was free where the job needs its 0.5 GiB and a context's margin: run again (``setup_failed``), then a
    verifier_error that says why; never the candidate's crash."""
    w, v, read = _outcome(tmp_path, free=700 << 20)
    assert read.called
    assert v.status == "verifier_error" and w.setup_failed, (v.status, v.feedback)
    assert "other processes held it" in v.feedback and "0.68 GiB" in v.feedback and "not your kernel" in v.feedback
    assert v.cheats == [] and v.pass_strict is None


def test_redteam_an_out_of_memory_line_on_a_free_device_keeps_its_crash(tmp_path):
    """A candidate that fills the device itself and dies, or prints the line and exits, leaves the device free once its
    process is gone: the reading decides, not the line, and the verdict is its crash."""
    w, v, _ = _outcome(tmp_path, free=70 * GIB)
    assert v.status == "crash" and not w.setup_failed, (v.status, v.feedback)
    # beside other jobs it is first run again alone (a shortage beside them is not yet the candidate's)
    w, v, _ = _outcome(tmp_path, free=70 * GIB, alone=False)
    assert v.status == "verifier_error" and w.setup_failed and w.alone and "run again alone" in v.feedback
    # just under the job's need, and just over it
    need = PLAN.job_bytes() + CONTEXT_MARGIN_BYTES
    assert _outcome(tmp_path, free=need - 1)[1].status == "verifier_error"
    assert _outcome(tmp_path, free=need)[1].status == "crash"


def test_redteam_no_device_reading_where_the_line_is_not_the_devices(tmp_path):
    """Another last line (an invalid access, the host's memory), the cpu backend, or cheat evidence already seen: the
    device is not read and the crash (or the cheat) stands, however full the device is."""
    for log in (LOG.replace(POISON_OOM, "RuntimeError: CUDA error: an illegal memory access was encountered"),
                LOG.replace(POISON_OOM, "MemoryError")):
        w, v, read = _outcome(tmp_path, free=0, log=log)
        assert v.status == "crash" and not w.setup_failed and not read.called, (log, v.status)
    w, v, read = _outcome(tmp_path, free=0, backend="cpu")
    assert v.status == "crash" and not read.called
    ev = Evidence()
    ev.add(cheats.C18, "printed a verdict line")  # the one code the process outcome leaves to the end
    w, v, _ = _outcome(tmp_path, free=0, ev=ev)
    assert v.status == "cheat" and cheats.C18 in v.cheats and not w.setup_failed, (v.status, v.feedback)


def test_a_reading_that_fails_or_a_missing_plan_leaves_the_crash():
    w = _work()
    with mock.patch.object(admission, "free_bytes", side_effect=RuntimeError("no context")):
        assert device_held_by_others(w, PLAN) == ""
    with mock.patch.object(admission, "free_bytes", return_value=0):
        assert device_held_by_others(w, None) == ""
        assert device_held_by_others(w, PLAN).startswith("0.00 GiB of the device was free")


def test_a_trials_own_device_out_of_memory_error_is_marked_for_the_reading():
    """A trial whose forward raised the device's out-of-memory error is marked (its number), so that the judge reads
    the device before it calls it a crash; the host's memory or another error is not."""
    plan = SimpleNamespace(trial_inputs=lambda *a: [torch.zeros(4)], ref_mod=None, pooled=[], selects=False)
    ex = SimpleNamespace(job=Job(kind="candidate", backend="cpu", build_root="", reference_code="", init_seed=0,
                                 n_trials=5), job_dir=Path("/nonexistent"), device="cpu",
                         ledger=Ledger(), prefetched=None, give_way=lambda: None,
                         aside=contextlib.nullcontext, poison=0)

    def checked(error: str):
        report = ChildReport(kind="candidate", trials=[TrialReport(index=0, kernel_calls=1),
                                                       TrialReport(index=1, error=error)])
        report.trials[0].error = ""
        with mock.patch("verifier.judge.trials.check_outputs", return_value=True), \
                mock.patch("verifier.judge.trials.load_outputs", return_value=([torch.zeros(4)], "")), \
                mock.patch.object(Ledger, "unsealed", return_value=""):
            report.trials[0].output_file = "out_0.pt"
            return check_trials(VerifyConfig(), plan, ex, report, lambda x: x, None, Evidence())

    t = checked("Traceback ...\n" + POISON_OOM)
    assert t.device_oom == 2 and "raised an error (out of memory)" in t.crash_detail
    host = checked("Traceback ...\nMemoryError")
    assert host.device_oom == 0 and "raised an error (out of memory)" in host.crash_detail  # the host's: labelled
    illegal = checked("Traceback ...\nRuntimeError: CUDA error: an illegal memory access was encountered")
    assert illegal.device_oom == 0 and "(out of memory)" not in illegal.crash_detail
    # the label reads what the trial raised (its last line), as the crash outcome does: a memory error caught on the
    # way and another raised is not labelled
    caught = checked("Traceback ...\nMemoryError\n\nDuring handling of the above exception, another exception "
                     "occurred:\n\nTraceback ...\nValueError: shapes differ")
    assert caught.device_oom == 0 and "(out of memory)" not in caught.crash_detail


# A trial's own out-of-memory error beside other jobs (verdict._device_shortage): the planned bytes the
# memory gate admits jobs by count the task's tensors, never a candidate's own workspace (an im2col convolution asked
# 17 GiB on the extra shape with 16 GiB free beside seven other jobs on one H100, 54a3136), so such a job is run again
# with the gate to itself before the shortage is the candidate's crash.

def test_a_request_alone_waits_for_the_jobs_admitted_and_nothing_enters_beside_it():
    import threading
    import time

    gate = admission.MemoryGate(10 * GIB)
    gate.acquire(GIB)  # one job running
    order: list = []

    def alone():
        with gate.admit(admission.ALONE):
            order.append(("alone in", gate.admitted))
            time.sleep(0.3)
            order.append(("alone out", gate.admitted))

    t = threading.Thread(target=alone)
    t.start()
    time.sleep(0.2)
    assert order == [] and gate.waiting == 1  # the running job's 1 GiB keeps it out
    gate.release(GIB)
    time.sleep(0.1)
    small = threading.Thread(target=lambda: (gate.acquire(GIB), order.append(("small in", 0)), gate.release(GIB)))
    small.start()
    t.join()
    small.join()
    assert order[0] == ("alone in", 10 * GIB) and order[1] == ("alone out", 10 * GIB)  # the whole budget, alone
    assert order[2] == ("small in", 0) and gate.admitted == 0


def test_a_trial_out_of_device_memory_is_run_again_alone_and_its_second_outcome_is_the_verdict(monkeypatch):
    """The engine's side (engine.execute_item): the first attempt's trial ran out of device memory beside other jobs;
    the second runs at once with ``alone`` set, and its outcome (here a pass: the workspace fitted the device) is the
    verdict, marked ``memory_alone``; no set-up wait is spent on it."""
    import time

    from verifier import engine
    from verifier.judge.verdict import _device_shortage, finish

    seen: list = []

    def fake_execute(w, backend, cfg, build_root):
        seen.append(w.alone)
        if not w.alone:
            return _device_shortage(w, None, "Trial 6")
        w.verdict.correct = True
        return finish(w, "pass")

    monkeypatch.setattr(engine, "_execute", fake_execute)
    monkeypatch.setattr(engine, "compile_done", lambda w, results, root: True)
    w = _work()
    t0 = time.monotonic()
    out = engine.execute_item(w, [], VerifyConfig(), Path("/nonexistent"))
    assert seen == [False, True] and time.monotonic() - t0 < 2.0
    assert out.verdict.status == "pass" and out.verdict.versions.get("memory_alone") is True
    assert out.verdict.versions.get("setup_retries") == 1


def test_redteam_an_out_of_memory_error_raised_on_every_run_keeps_its_crash(tmp_path):
    """Red team, end to end on the cpu backend: a forward that raises the device's out-of-memory error on every call
    (the line is the candidate's to write) gets one run alone and then its crash, never a pass or a verifier_error;
    the same forward raising it on the extra shape only is no C14 (memory, not sizes) and no pass either."""
    oom = ('raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total '
           'capacity of 79.18 GiB of which 3.00 GiB is free.")')
    verdicts = fx.verify_cpu(TASK, {
        "always": fx.cpu_candidate(f"y = ext.relu(x.contiguous())\n{oom}"),
        "extra_shape_only": fx.cpu_candidate(f"if x.shape != (64, 1000):\n    {oom}\nreturn ext.relu(x.contiguous())"),
        "honest": fx.HONEST_RELU,
    }, str(tmp_path / "b"))
    for name in ("always", "extra_shape_only"):
        v = verdicts[name]
        assert v.status == "crash" and v.versions.get("memory_alone") is True, (name, v.status, v.feedback)
        assert "out of memory" in v.feedback and not v.cheats
        # one run again, at once and alone (no set-up wait spent), and what the first run failed on kept
        assert v.versions.get("setup_retries") == 1 and len(v.versions["setup_failures"]) == 1, v.versions
        assert "ran out of device memory beside other jobs" in v.versions["setup_failures"][0]
    assert verdicts["honest"].status == "pass" and "memory_alone" not in verdicts["honest"].versions
