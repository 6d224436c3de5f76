"""Each execution slot's harness and judge in a trusted process of its own (verifier/workers.py), on the cpu
backend with real processes:

- a slot's process runs its jobs and asks the engine's memory gate for their bytes (one gate per device for every
  slot), and gives them back; bytes a process held when it died are given back by the engine;
- a process that dies mid-job is the verifier's failure (WorkerDied; in a batch: that candidate's
  ``verifier_error``), never the candidate's verdict, and the slot's next job gets a new process;
- a batch judged in slot processes gives the verdicts the in-process slots give (a pass, a wrong output, a compile
  error), in processes that are not the engine's, and keeps them for the next batch;
- a slot's process judges by the plan the engine made of the task (handed with the candidate), not one of its own;
- slots' processes start side by side: each one's imports run while the others' do (a cold batch's slots came up
  one after another when the spawner thread waited for each).

The verifier's own failures while executing a candidate (run again, or whose they are): tests/test_verifier_setup_failures.py."""

import os
import threading
import time
from pathlib import Path

import pytest
import torch

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import workers
from verifier.execute import admission
from verifier.engine import VerifyConfig, verify_batch

ENTRY = "tests.test_verifier_workers:serve_probe"
GIB = 1 << 30


def serve_probe(fd: int) -> None:
    """A slot process whose jobs are ``probe_job``'s (this module, imported in the new process)."""
    workers.serve(fd, probe_job)


MEET_ENTRY = "tests.test_verifier_workers:serve_after_meeting"
MEET_WAIT_S = 60.0


def serve_after_meeting(fd: int) -> None:
    """A slot process whose start (before its first word, as its imports are) lasts until another one has started
    too, or MEET_WAIT_S: it records whether it met one."""
    here = Path(os.environ["KM_TEST_MEET_DIR"])
    (here / f"started-{os.getpid()}").write_text("")
    deadline, met = time.monotonic() + MEET_WAIT_S, False
    while not met and time.monotonic() < deadline:
        met = any(p.name != f"started-{os.getpid()}" for p in here.glob("started-*"))
        time.sleep(0.05)
    (here / f"met-{os.getpid()}").write_text(str(met))
    workers.serve(fd, probe_job)


def probe_job(kind: str, n: int = 0, hold_s: float = 0.0):
    """What the tests ask of a slot process: its pid, bytes admitted for a while, or its own death."""
    if kind == "pid":
        return os.getpid()
    if kind == "admit":
        with admission.gate_for("cpu", 4.0).admit(n) as waited:
            time.sleep(hold_s)
        return waited
    if kind == "die_holding":
        with admission.gate_for("cpu", 4.0).admit(n):
            os._exit(7)
    if kind == "turn":  # a child's turn, held for a while (or the process's death while it holds one)
        with admission.child_turn() as waited:
            if n:
                os._exit(7)
            time.sleep(hold_s)
        return waited
    if kind == "raise":
        raise ValueError("the engine's own bug")
    if kind == "admit_gpu":  # a device this machine lacks: its total memory as the slot's process would measure it
        admission._CAPACITY["cuda"] = n
        with admission.gate_for("cuda", 0.0).admit(GIB):
            return "admitted"
    raise AssertionError(kind)


def test_a_slot_process_runs_jobs_and_asks_the_engines_gate():
    gate = admission.gate_for("cpu", 4.0)
    seen = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            seen.append(gate.admitted)
            time.sleep(0.01)

    with workers.lease(ENTRY) as current:
        pid = current().run(("pid",))
        assert pid != os.getpid() and pid == current().proc.pid
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        waited = current().run(("admit", 3 * GIB, 0.3))
        stop.set()
        watcher.join()
        assert waited < 1.0
        assert max(seen) == 3 * GIB  # the engine's gate held the job's bytes while it ran
        assert gate.admitted == 0  # and has them back
        # the gate is one per device for every slot: a second slot asking for more than is left waits for the first
        with workers.lease(ENTRY) as other:
            other()  # started before the first slot's job
            t = threading.Thread(target=lambda: current().run(("admit", 3 * GIB, 0.6)))
            t.start()
            time.sleep(0.3)
            assert other().run(("admit", 2 * GIB, 0.0)) > 0.1
            t.join()
    with workers.lease(ENTRY) as again:  # kept for the next lease: the same process
        assert again().run(("pid",)) in (pid, other().proc.pid)


def test_slot_processes_take_the_batchs_child_turns_and_a_dead_ones_turn_comes_back():
    """Where a batch has more slots than children at a time (``judging_slots``), a slot's process asks the engine
    for its child's turn over its pipe (admission.child_turn) and gives it back as the child ends: with one turn, a
    second slot's child waits for the first's; a process that dies holding its turn gives it back (the engine's
    side of its pipe); without turns (None) a child never waits."""
    turns = admission.ChildTurns(1)
    with workers.lease(ENTRY) as current, workers.lease(ENTRY) as other:
        other()  # started before the first slot's turn
        got = []
        t = threading.Thread(target=lambda: got.append(current().run(("turn", 0, 0.8), turns)))
        t.start()
        time.sleep(0.3)
        assert other().run(("turn", 0, 0.0), turns) > 0.3  # waited for the first slot's child to end
        t.join()
        assert got[0] < 0.3
        with pytest.raises(workers.WorkerDied):
            current().run(("turn", 1, 0.0), turns)  # dies holding the turn
        assert other().run(("turn", 0, 0.0), turns) < 0.3  # which came back
        assert other().run(("turn", 0, 0.0), None) == 0.0


def test_slots_processes_start_side_by_side(monkeypatch, tmp_path):
    """Two slots leasing a process at once: each process's start overlaps the other's (each saw the other begin
    before its own first word), so a batch's slots are not up one after another."""
    monkeypatch.setenv("KM_TEST_MEET_DIR", str(tmp_path))
    pids: list = []

    def slot():
        with workers.lease(MEET_ENTRY) as current:
            pids.append(current().run(("pid",)))

    threads = [threading.Thread(target=slot) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert len(set(pids)) == 2
        assert {p: (tmp_path / f"met-{p}").read_text() for p in pids} == {p: "True" for p in pids}
    finally:
        workers.end_kept()


def test_a_slot_process_that_dies_or_fails_is_the_verifiers_error_and_the_slot_goes_on():
    gate = admission.gate_for("cpu", 4.0)
    with workers.lease(ENTRY) as current:
        first = current()
        with pytest.raises(workers.WorkerDied, match="exit 7"):
            first.run(("die_holding", 2 * GIB))
        assert gate.admitted == 0  # what the dead process held is given back
        second = current()
        assert second is not first and second.alive()  # a new process
        with pytest.raises(workers.WorkerDied, match="ValueError: the engine's own bug"):
            second.run(("raise",))
        # a job that raised on the verifier's side leaves its process alive: the same one serves the next job
        assert current() is second and current().run(("pid",)) == second.proc.pid not in (first.proc.pid, os.getpid())


def test_the_engines_automatic_gpu_budget_is_measured_by_the_slots_process_and_its_failure_is_the_jobs(monkeypatch):
    """The engine's gate for a GPU with no configured budget takes the device's total memory from the slot's process
    that asks (which holds a CUDA context anyway): the engine made a CUDA context of its own to measure it, which ran
    out of memory on one H200 shared by ten test workers, inside its answer, and closed the slot's process with an
    honest candidate's verifier_error nobody tried again (tests/gpu at f9e66f9). A gate the engine cannot make is
    the asking job's error (where the engine's retries for device memory apply), and the slot's process lives on."""
    monkeypatch.setattr(admission, "_GATES", {})

    def no_device(*_a, **_k):
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(torch.cuda, "mem_get_info", no_device)  # the engine's process must not need it
    with workers.lease(ENTRY) as current:
        assert current().run(("admit_gpu", 64 * GIB)) == "admitted"
        assert admission._GATES[("cuda", 0.0)].budget == int(64 * GIB * admission.CUDA_SHARE)
        admission._GATES.clear()
        monkeypatch.setattr(admission, "auto_budget", no_device)
        slot = current()
        with pytest.raises(workers.WorkerDied, match="could not admit the job: RuntimeError: CUDA error: out of memory"):
            slot.run(("admit_gpu", 64 * GIB))
        assert current() is slot and slot.alive() and slot.run(("pid",)) == slot.proc.pid


TASK = Task.from_code(fx.RELU_TASK.replace("torch.randn(64, 1000)", "torch.randn(40, 700)") + "\n# slot processes\n",
                      name="slot_processes_relu", source="seed", level=1)


def _batch(mode: str, build_dir: str):
    cands = [fx.HONEST_RELU, fx.cpu_candidate("return ext.relu(x.contiguous()) * 1.5"), fx.BROKEN_CPP]
    items = [(TASK, Candidate(candidate_id=f"c{k}", task_id=TASK.task_id, backend="cpu", generator="t", code=c))
             for k, c in enumerate(cands)]
    cfg = VerifyConfig(build_dir=build_dir, timing_trials=3, warmup=1, time_torch_compile=False, run_timeout_s=60,
                       memory_limit_gb=4, exec_processes=mode, exec_workers=2)
    return verify_batch(items, config=cfg)


def test_a_batch_judged_in_slot_processes_gives_the_in_process_verdicts(shared_build_dir):
    threads = _batch("threads", shared_build_dir)
    procs = _batch("processes", shared_build_dir)
    assert [v.status for v in threads] == ["pass", "wrong", "compile_error"]
    assert [(v.candidate_id, v.status, v.cheats, v.correct) for v in procs] == \
           [(v.candidate_id, v.status, v.cheats, v.correct) for v in threads]
    assert procs[0].runtime_us and procs[0].stage_seconds["execute_child"] > 0
    kept = [p.proc.pid for p in workers._IDLE]
    assert kept and os.getpid() not in kept  # the slots' processes, kept for the next batch
    again = _batch("processes", shared_build_dir)
    assert [v.status for v in again] == [v.status for v in threads]
    assert sorted(p.proc.pid for p in workers._IDLE) == sorted(kept)  # the same processes served it
    # given back between batches: the kept processes end (and their fork servers), the next batch starts its own
    ended = [p.proc for p in workers._IDLE]
    workers.end_kept()
    assert workers._IDLE == [] and all(p.poll() is not None for p in ended)
    after = _batch("processes", shared_build_dir)
    assert [v.status for v in after] == [v.status for v in threads]
    assert workers._IDLE and not {p.proc.pid for p in workers._IDLE} & set(kept)


def test_a_slot_process_judges_by_the_plan_the_engine_made_and_does_not_plan_the_task_again(shared_build_dir,
                                                                                            monkeypatch):
    """The engine hands its plan of the task (its preparation's: the extra shape, the measured tolerance) to the slot's
    process with the candidate (``Work.plan``), which judges by it instead of planning the task again. The engine's
    plans are marked here as no plan of the slot's own could be (a task fault only this process's planning gives):
    the verdict says which plan judged. Without the hand-over the slot's process plans the task itself (no mark)
    and the honest candidate passes."""
    from verifier import engine
    from verifier.judge import plan as plan_mod

    cfg = VerifyConfig(build_dir=shared_build_dir, timing_trials=3, warmup=1, time_torch_compile=False,
                       run_timeout_s=60, memory_limit_gb=4, exec_processes="processes", exec_workers=1)

    def batch_of(tag: str) -> list:
        task = Task.from_code(TASK.reference_code + f"# {tag}\n", name="handed_plan_relu", source="seed", level=1)
        engine_plan = plan_mod.task_plan(task.reference_code, "cpu", cfg)  # this process's, before its batch
        return [(task, Candidate(candidate_id="c0", task_id=task.task_id, backend="cpu", generator="t",
                                 code=fx.HONEST_RELU))], engine_plan

    items, _ = batch_of("planned here")
    task = items[0][0]
    assert plan_mod.plan_to_hand_over(task.reference_code + "# never planned\n", "cpu", cfg) is None
    handed = plan_mod.plan_to_hand_over(task.reference_code, "cpu", cfg)
    made = plan_mod.task_plan(task.reference_code, "cpu", cfg)
    assert handed is not None and handed.ref_mod is None and made.ref_mod is not None  # picklable: no module
    assert (handed.other_shape, handed.pooled, handed.output_bytes) == (made.other_shape, made.pooled,
                                                                        made.output_bytes)
    real = plan_mod._build_plan

    def marked(*a, **kw):
        plan = real(*a, **kw)
        plan.task_fault = "marked by the engine's own planning"
        return plan

    monkeypatch.setattr(plan_mod, "_build_plan", marked)
    items, engine_plan = batch_of("marked, handed over")
    assert engine_plan.task_fault == "marked by the engine's own planning"
    (v,) = verify_batch(items, config=cfg)
    assert v.status == "task_error" and "marked by the engine's own planning" in v.feedback
    assert v.stage_seconds.get("execute_plan") is not None
    monkeypatch.setattr(engine, "plan_to_hand_over", lambda *a, **kw: None)
    items, engine_plan = batch_of("marked, not handed over")
    assert engine_plan.task_fault
    (own,) = verify_batch(items, config=cfg)
    assert own.status == "pass", own.feedback  # the slot's process planned the task itself


def test_a_judging_slot_runs_the_next_candidates_child_while_it_judges_and_children_keep_their_count(
        shared_build_dir, monkeypatch):
    """One child at a time and one judging slot beside it (``judging_slots``): the second candidate's child runs
    while the first candidate is judged (its slot gave the child's turn back as its child ended), and no two
    children ever run at once. With one slot (``judging_slots = 0``) the second child waits for the first judge."""
    from verifier import engine

    spans: dict[str, list] = {"child": [], "judge": []}
    real_driven, real_judge = engine.run_driven, engine.judge

    def driven(job, *a, **kw):
        t0, ended = time.monotonic(), kw.get("on_child_end")
        if job.kind == "candidate" and ended is not None:
            def child_ended():  # as the child has ended (and before its turn is given back)
                spans["child"].append((t0, time.monotonic()))
                ended()
            kw["on_child_end"] = child_ended
        return real_driven(job, *a, **kw)

    def judge(*a, **kw):
        t0 = time.monotonic()
        time.sleep(3.0)  # a long judge (a large output's comparisons)
        try:
            return real_judge(*a, **kw)
        finally:
            spans["judge"].append((t0, time.monotonic()))

    monkeypatch.setattr(engine, "run_driven", driven)
    monkeypatch.setattr(engine, "judge", judge)
    items = [(TASK, Candidate(candidate_id=f"j{k}", task_id=TASK.task_id, backend="cpu", generator="t", code=c))
             for k, c in enumerate([fx.HONEST_RELU, fx.cpu_candidate("return ext.relu(x.contiguous()).clone()")])]
    cfg = VerifyConfig(build_dir=shared_build_dir, timing_trials=3, warmup=1, time_torch_compile=False,
                       run_timeout_s=60, memory_limit_gb=4, exec_processes="threads", exec_workers=1, judging_slots=1)
    assert cfg.exec_slots("cpu") == 2 and cfg.exec_children("cpu") == 1
    vs = verify_batch(items, config=cfg)
    assert [v.status for v in vs] == ["pass", "pass"], [v.feedback[:300] for v in vs]
    (a0, a1), (b0, b1) = sorted(spans["child"])
    assert a1 <= b0, spans  # one child at a time
    first_judge = min(spans["judge"])
    assert b0 < first_judge[1], spans  # the second child ran while the first candidate was judged
    assert max(v.stage_seconds["execute_child_turn"] for v in vs) > 0  # (its slot waited for the turn)


def test_a_slot_process_killed_mid_batch_ends_that_candidate_as_a_verifier_error(shared_build_dir):
    slow = fx.cpu_candidate("return ext.spin(x)")  # never returns: judged for its whole run timeout
    items = [(TASK, Candidate(candidate_id=f"k{k}", task_id=TASK.task_id, backend="cpu", generator="t", code=c))
             for k, c in enumerate([slow, fx.HONEST_RELU])]
    cfg = VerifyConfig(build_dir=shared_build_dir, timing_trials=3, warmup=1, time_torch_compile=False,
                       run_timeout_s=60, memory_limit_gb=4, exec_processes="processes", exec_workers=1)
    killed, done = [], threading.Event()

    def kill_the_slot():  # the slot's process, once it has judged one job for longer than the honest one takes
        while not done.is_set():
            for p in list(workers._LEASED):
                since = p.busy_since
                if since is not None and time.monotonic() - since > 12 and p.proc.poll() is None:
                    p.proc.kill()
                    killed.append(p.proc.pid)
                    return
            time.sleep(0.1)

    t = threading.Thread(target=kill_the_slot, daemon=True)
    t.start()
    vs = verify_batch(items, config=cfg)
    done.set()
    t.join()
    assert killed
    assert vs[0].status == "verifier_error" and "not your kernel's outcome" in vs[0].feedback, vs[0].feedback
    assert vs[1].status == "pass", vs[1].feedback  # the slot went on, in a new process
