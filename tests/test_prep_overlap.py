"""Task preparation off the candidates' critical path (issue 38), on the cpu backend with real children:

- the reference's ``torch.compile`` is built before its child takes the device lock, so another process's
  timing phase can take the lock while inductor compiles (it used to be held exclusive for the whole build:
  on the H100 the lock waits of real code were 7 + 7 s per candidate with the compiled reference timed);
- a batch starts a task's preparation (plan, reference timing) when it meets the task, so it runs while the
  task's first candidate compiles, not after its build;
- what is timed, and every verdict, is unchanged: the compiled reference is still timed, under the lock;
- a task's timing comes in two parts, each its own child: the eager model with the null bracket, which a candidate's
  execution needs, and torch.compile's model, which only the judge needs: the candidates start on the first while
  the second is built (up to 50 s a task on an H200's real batch)."""

import threading
import time
import uuid
from pathlib import Path
from unittest import mock

import pytest
import torch

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import engine
from verifier import runs
from verifier.common.contract import COMPILE_CACHE
from verifier.execute import compile_cache, locks
from verifier.execute.queue import ReadyQueue
from verifier.engine import VerifyConfig, verify_batch
from verifier.common.devlock import DeviceLock

# a program no other test plans or times (its own key in every cache)
TASK = Task.from_code(fx.RELU_TASK.replace("torch.randn(64, 1000)", "torch.randn(48, 640)") + "\n# prep overlap\n",
                      name="prep_overlap_relu", source="seed", level=1)


@pytest.fixture
def fresh_memo(monkeypatch):
    monkeypatch.setattr(runs, "_REF_TIMINGS", {})


def test_the_compiled_reference_is_built_outside_the_device_lock(tmp_path, fresh_memo):
    cfg = VerifyConfig(build_dir=str(tmp_path / "build"), timing_trials=3, warmup=1, time_torch_compile=True,
                       run_timeout_s=60, memory_limit_gb=4, pch=False, prep_cache=False,
                       lock_dir=str(tmp_path / "locks"))  # this test's own: no other test worker's timing in its marks
    lock_file = locks.lock_path(cfg, "cpu")
    assert lock_file
    cfg.build_root().mkdir(parents=True, exist_ok=True)
    taken, stop = [], threading.Event()

    def neighbour():  # another process's short timing phases: the lock, exclusive, whenever it is free
        lock = DeviceLock(lock_file)
        while not stop.is_set():
            if lock.acquire(True, 0.0):
                taken.append(time.monotonic())
                lock.release()
            time.sleep(0.02)
        lock.close()

    plan = engine.task_plan(TASK.reference_code, "cpu", cfg, "prep")
    poller = threading.Thread(target=neighbour, daemon=True)
    poller.start()
    t0 = time.monotonic()
    timing = runs.measure_reference(plan, "cpu", cfg, cfg.build_root(), runs.COMPILED, {})
    t1 = time.monotonic()
    stop.set()
    poller.join()
    rep = timing.report
    assert not rep.timing_error and not rep.compile_error, (rep.timing_error, rep.compile_error)
    assert rep.compiled is not None and timing.clocked.get("compile_s")
    # the compiled part times the compiled model only (the eager model and the null are the eager part's)
    assert timing.clocked["held"]["brackets"].keys() == {"compiled"} and "eager_s" not in timing.clocked
    assert rep.timing_exclusive  # under the lock
    build = rep.phase_s.get("compile_build", rep.phase_s.get("compile", 0.0))  # (before: one phase, built and timed)
    assert build > 1.0, rep.phase_s  # inductor built the graph here (C++ on cpu: seconds)
    # the neighbour got the lock while the child built: its longest wait is shorter than the build itself
    # (before: the child held it from its start to its last timed call, the build inside)
    marks = [t0] + [t for t in taken if t0 <= t <= t1] + [t1]
    longest = max(b - a for a, b in zip(marks, marks[1:]))
    held = sum(v for k, v in rep.phase_s.items() if k in ("eager", "wall", "compile"))
    assert longest < build, (longest, rep.phase_s)
    assert longest < held + build / 2, (longest, rep.phase_s)
    # what inductor built for this task's compiled part (the CPU's ISA checks, the kernel) was kept for this machine
    # (verifier/execute/compile_cache.py); the next task's compiled part builds into a copy of it, in its own job
    kept = compile_cache.kept_dir(cfg.build_root(), torch.__version__)
    first = {rel for rel, _ in compile_cache._files(kept)}
    assert any(r.startswith("inductor/") and r.endswith(".so") for r in first), sorted(first)
    assert not any("precompiled_headers" in r for r in first), sorted(first)
    seen = {}
    real_keep = compile_cache.keep

    def keep(job_dir, root, version):  # the job's copy as the child left it
        seen["job"] = {rel for rel, _ in compile_cache._files(Path(job_dir) / COMPILE_CACHE)}
        return real_keep(job_dir, root, version)

    other = Task.from_code(TASK.reference_code.replace("torch.randn(48, 640)", "torch.randn(40, 520)"),
                           name="prep_overlap_relu_2", source="seed", level=1)
    with mock.patch.object(compile_cache, "keep", keep):
        timing = runs.measure_reference(engine.task_plan(other.reference_code, "cpu", cfg, "prep2"), "cpu", cfg,
                                        cfg.build_root(), runs.COMPILED, {})
    assert not timing.report.compile_error and timing.clocked.get("compile_s"), timing.report
    assert first <= seen["job"], sorted(first - seen["job"])  # seeded with the first task's files
    made = {r for r in seen["job"] - first if r.startswith("inductor/")}
    assert any(r.endswith(".so") for r in made), sorted(made)  # its own kernel, built into the copy
    assert made <= {rel for rel, _ in compile_cache._files(kept)}  # and kept in turn


def test_a_task_is_prepared_while_its_first_candidate_compiles(shared_build_dir, fresh_memo, monkeypatch):
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=3, timing_trials=3, warmup=1, time_torch_compile=False,
                       run_timeout_s=60, memory_limit_gb=4, prep_cache=False, exec_workers=1)
    events = []
    real_measure, real_done = runs.measure_reference, engine.compile_done

    def measure(*a):
        events.append(("reference timing starts", time.monotonic()))
        return real_measure(*a)

    def compile_done(*a, **kw):
        events.append(("candidate built", time.monotonic()))
        return real_done(*a, **kw)

    monkeypatch.setattr(runs, "measure_reference", measure)
    monkeypatch.setattr(engine, "compile_done", compile_done)
    # sources no build root holds yet: the candidate compiles (seconds, against the precompiled header)
    code = fx.HONEST_RELU.replace("ModelNew(nn.Module):", f"ModelNew(nn.Module):\n    # {uuid.uuid4().hex}").replace(
        "#include <torch/extension.h>", f"#include <torch/extension.h>\n// {uuid.uuid4().hex}")
    (v,) = verify_batch([(TASK, Candidate(candidate_id="c", task_id=TASK.task_id, backend="cpu", generator="t",
                                          code=code))], config=cfg)
    assert v.status == "pass" and v.correct and v.eager_us, (v.status, v.feedback[:500])
    names = [e[0] for e in sorted(events, key=lambda e: e[1])]
    assert names == ["reference timing starts", "candidate built"], events  # before: built, then timed
    # its candidate found the task prepared (or being prepared): no second measurement
    assert sum(1 for e in events if e[0] == "reference timing starts") == 1


@pytest.mark.parametrize("exec_workers, expected", [(1, 2), (2, 2), (5, 5)])
def test_as_many_tasks_are_prepared_at_once_as_execution_children_run(monkeypatch, exec_workers, expected):
    """A cold batch prepares tasks as wide as it executes (at least two): with two at a time, a batch of one
    candidate per task waited on its tasks' preparations (14-22 s each on an H200) one pair after another."""
    cfg = VerifyConfig(exec_workers=exec_workers)
    assert runs.prep_workers(cfg, {"cpu"}) == expected
    running, most, lock = [0], [0], threading.Lock()
    release = threading.Event()

    def prepare(key, *_, **__):  # stands in for prepare_task: counts how many run at the same time
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        release.wait(5)
        with lock:
            running[0] -= 1

    monkeypatch.setattr(runs, "prepare_task", prepare)
    with runs.preparing(runs.prep_workers(cfg, {"cpu"})) as preps:
        for k in range(8):
            preps.submit(("task", k))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and most[0] < expected:
            time.sleep(0.01)
        time.sleep(0.1)  # a worker beyond the count would have started by now
        seen = most[0]
        release.set()
    assert seen == expected


def test_a_slot_never_takes_a_candidate_of_a_task_still_being_prepared(monkeypatch):
    """A slot that took a candidate whose task was still being prepared waited for the reference's timing doing
    nothing (405 of the 2,000 s eight slots spent executing in one H200's real batch) while candidates of prepared
    tasks queued: the queue hands out a task the slot has judged first, then the oldest candidate of a prepared
    task, and a slot with only unprepared ones queued waits in the queue, woken by a preparation's end, free to take
    whichever task is prepared first."""
    release = {k: threading.Event() for k in "abc"}
    began = {k: threading.Event() for k in "abc"}

    def prepare(key, *_, **__):  # stands in for prepare_task
        began[key].set()
        release[key].wait(30)

    monkeypatch.setattr(runs, "prepare_task", prepare)

    def wait_prepared(key):
        deadline = time.monotonic() + 30  # a bound on a broken queue, not a timing
        while not preps.prepared(key) and time.monotonic() < deadline:
            time.sleep(0.01)
        return preps.prepared(key)

    def get_in_thread(seen=frozenset()):
        got: list = []
        t = threading.Thread(target=lambda: got.append(ready.get(seen)), daemon=True)
        t.start()
        return t, got

    ready = ReadyQueue(["a", "b", "a", "b", "c", "b", "c", "d"])
    with runs.preparing(3, on_end=ready.poke) as preps:
        for key in "abc":
            preps.submit(key)
        assert all(began[k].wait(10) for k in "abc")  # three threads: every preparation under way
        ready.prepared = preps.prepared
        for i in range(5):
            ready.put((i, []))
        t, got = get_in_thread()
        t.join(0.5)
        assert t.is_alive() and not got  # nothing prepared: the slot waits in the queue, holding no candidate
        release["b"].set()
        t.join(30)
        assert got == [(1, [])]  # woken by b's preparation: the oldest of the task prepared first
        assert ready.get() == (3, [])
        release["c"].set()
        assert wait_prepared("c") and not preps.prepared("a")
        ready.put((5, []))
        ready.put((6, []))  # queued now: 0 (a), 2 (a), 4 (c), 5 (b), 6 (c)
        assert ready.get(seen={"b"}) == (5, [])  # a task this slot judged before, before older prepared ones
        assert [ready.get() for _ in range(2)] == [(4, []), (6, [])]
        ready.put((7, []))  # a task never submitted for preparation has nothing to wait for
        assert ready.get() == (7, [])
        t, got = get_in_thread()
        t.join(0.5)
        assert t.is_alive() and not got
        release["a"].set()
        t.join(30)
        assert got == [(0, [])] and ready.get() == (2, [])
        ready.put(None)
        assert ready.get() is None  # the end of the batch


def test_a_candidate_put_back_for_its_run_alone_is_taken_only_when_no_other_can_be():
    """The engine's set-up retry (engine._requeue) puts a candidate back for a run with the device's memory to
    itself: a slot takes it only once no other candidate can be taken (a task this slot judged, a prepared one), the
    oldest such first, and before the end of the batch; a slot waiting on an empty queue is woken by it."""
    ready = ReadyQueue(["a", "b", "c", "d"])
    ready.put((0, []))
    ready.put_later((1, ["f"]))
    ready.put((2, []))
    ready.put_later((3, []))
    assert ready.get(seen={"c"}) == (2, [])  # the slot's own task first, as before
    assert ready.get() == (0, [])
    assert ready.get() == (1, ["f"]) and ready.get() == (3, [])  # nothing else ready: the put-back ones, oldest first
    got: list = []
    t = threading.Thread(target=lambda: got.append(ready.get()), daemon=True)
    t.start()
    t.join(0.3)
    assert t.is_alive() and not got
    ready.put_later((1, []))
    t.join(10)
    assert got == [(1, [])]
    ready.put(None)
    ready.put_later((3, []))
    assert ready.get() == (3, []) and ready.get() is None  # the end of the batch comes after every put-back one


def test_a_task_whose_preparation_waits_for_a_thread_is_not_waited_for(monkeypatch):
    """A preparation that has not begun (every preparation thread is busy with other tasks) is not waited for: a
    slot takes its candidate and times the reference itself, as slots did before tasks were prepared ahead, rather
    than idle while the threads work through the queue."""
    release, began = threading.Event(), threading.Event()

    def prepare(key, *_, **__):
        began.set()
        release.wait(30)

    monkeypatch.setattr(runs, "prepare_task", prepare)
    ready = ReadyQueue(["x", "y"])
    with runs.preparing(1, on_end=ready.poke) as preps:
        preps.submit("x")
        preps.submit("y")  # behind x: the one thread is busy
        assert began.wait(10)
        ready.prepared = preps.prepared
        ready.put((0, []))
        ready.put((1, []))
        got: list = []
        slot = threading.Thread(target=lambda: got.append(ready.get()), daemon=True)
        slot.start()
        slot.join(30)
        release.set()
        assert got == [(1, [])]  # y's, though x's came first: x's preparation is under way


def test_every_queued_eager_part_is_prepared_before_any_compiled_part(monkeypatch):
    """A task's compiled part is queued when its eager part ends, behind every eager part queued: a task met later
    is ready for its candidates before an earlier task's torch.compile is built. A task counts as prepared once its
    eager part is over, its compiled part still to come."""
    order, gate = [], threading.Event()

    def prepare(key, *_, part):  # stands in for prepare_task
        if (key, part) == ("a", runs.EAGER):
            assert gate.wait(30)  # the one thread held here while b and c are submitted
        order.append((key, part, preps.prepared(key)))
        return part == runs.EAGER  # (a config that times torch.compile: the compiled part follows)

    monkeypatch.setattr(runs, "prepare_task", prepare)
    with runs.preparing(1) as preps:
        for key in "abc":
            preps.submit(key)
        gate.set()
    assert order == [(k, runs.EAGER, False) for k in "abc"] + [(k, runs.COMPILED, True) for k in "abc"]


def test_a_compiled_part_that_verdicts_wait_for_goes_before_every_part_queued(monkeypatch):
    """``hurry(key)`` (the engine's: a verdict waits for the task's torch.compile figures): a compiled part already
    queued goes next, ahead of the eager parts queued; one whose eager part has not ended goes first when it is
    queued; each runs once."""
    order, gate, at_b = [], threading.Event(), threading.Event()

    def prepare(key, *_, part):  # stands in for prepare_task
        if (key, part) == ("b", runs.EAGER):
            at_b.set()
            assert gate.wait(30)  # the one thread held here: a's compiled part queued, c's and d's eager parts too
        order.append((key, part))
        return part == runs.EAGER

    monkeypatch.setattr(runs, "prepare_task", prepare)
    with runs.preparing(1) as preps:
        preps.hurry("d")  # before anything of d's is queued
        for key in "abcd":
            preps.submit(key)
        assert at_b.wait(30)
        preps.hurry("a")  # its compiled part queued behind c's and d's eager parts
        gate.set()
    assert order == [("a", runs.EAGER), ("b", runs.EAGER), ("a", runs.COMPILED), ("c", runs.EAGER),
                     ("d", runs.EAGER), ("d", runs.COMPILED), ("b", runs.COMPILED), ("c", runs.COMPILED)], order
    assert all(preps.compiled_over(k).is_set() for k in "abcd")


def test_the_slot_takes_its_next_candidate_while_its_tasks_compiled_reference_is_still_being_timed(
        shared_build_dir, fresh_memo, monkeypatch):
    """The candidates start on the eager part, and one slot judges them one after another without waiting for the
    compiled part: here it is held back until the second candidate's child has started, which a slot that waited
    for it after judging the first would never start (the hold would run out and the order below fail). The compiled
    part is measured once, by the task's preparation, and the engine adds its time to both verdicts before it
    delivers them (engine.CompiledParts): the same figures in the same feedback sentence as a verdict judged after it."""
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=3, timing_trials=3, warmup=1, time_torch_compile=True,
                       run_timeout_s=90, memory_limit_gb=4, prep_cache=False, exec_workers=1)
    events, second = [], threading.Event()
    real_measure, real_driven = runs.measure_reference, engine.run_driven

    def measure(plan, backend, c, root, part, null):
        if part == runs.COMPILED:
            second.wait(60)
        events.append((f"{part} part starts", time.monotonic()))
        timing = real_measure(plan, backend, c, root, part, null)
        events.append((f"{part} part ends", time.monotonic()))
        return timing

    def driven(job, *a, **kw):
        if job.kind == "candidate":
            events.append(("candidate runs", time.monotonic()))
            if sum(e[0] == "candidate runs" for e in events) == 2:
                second.set()
        return real_driven(job, *a, **kw)

    monkeypatch.setattr(runs, "measure_reference", measure)
    monkeypatch.setattr(engine, "run_driven", driven)
    delivered = []
    codes = [fx.HONEST_RELU, fx.HONEST_RELU.replace("return ext.relu(x.contiguous())",
                                                    "flat = x.contiguous()\n        return ext.relu(flat)")]
    vs = verify_batch([(TASK, Candidate(candidate_id=f"c{k}", task_id=TASK.task_id, backend="cpu", generator="t",
                                        code=code)) for k, code in enumerate(codes)], config=cfg,
                      on_verdict=lambda i, v: delivered.append((i, time.monotonic())))
    names = [e[0] for e in sorted(events, key=lambda e: e[1])]
    assert names == ["eager part starts", "eager part ends", "candidate runs", "candidate runs",
                     "compiled part starts", "compiled part ends"], events
    compiled_end = next(t for name, t in events if name == "compiled part ends")
    assert len(delivered) == 2 and all(t >= compiled_end for _, t in delivered), (delivered, events)
    for v in vs:
        assert v.status == "pass" and v.eager_us and v.compile_us and v.speedup_compile, (v.status, v.feedback[:500])
        assert v.speedup_compile == pytest.approx(v.compile_us / v.runtime_us)
        assert f"torch.compile {v.compile_us:.1f} us (speedup {v.speedup_compile:.2f}x)." in v.feedback, v.feedback
        assert v.stage_seconds["verdict_compiled_wait"] > 0  # handed on by its slot, completed by the engine
        assert v.versions["timing"]["reference"]["brackets"].keys() == {"reference", "null", "compiled"}


def test_the_kept_compile_cache_takes_only_regular_files_the_job_wrote(tmp_path, monkeypatch):
    """A compiled part's job directory is writable by its sandboxed child: what is kept from it is a copy of each
    regular file, never a link (nor what it points at), a lock, inductor's precompiled header, a task's whole-graph
    entry or a file over the size limit; a file already kept is not replaced; the kept cache stops growing at its limit."""
    root, job = tmp_path / "root", tmp_path / "job"
    cache = compile_cache.seed(job, root, "9.9")
    assert cache == job / COMPILE_CACHE and cache.is_dir() and not any(cache.iterdir())  # nothing kept yet
    secret = tmp_path / "host_secret.txt"
    secret.write_text("host file")
    (cache / "inductor" / "ab").mkdir(parents=True)
    (cache / "inductor" / "ab" / "cab.cpp").write_text("// kernel")
    (cache / "inductor" / "ab" / "cab.so").write_bytes(b"\x7fELF" + b"0" * 100)
    (cache / "inductor" / "ab" / "link.so").symlink_to(secret)
    (cache / "inductor" / "linked_dir").symlink_to(tmp_path, target_is_directory=True)
    (cache / "inductor" / "locks").mkdir()
    (cache / "inductor" / "locks" / "x.lock").write_text("")
    (cache / "inductor" / "precompiled_headers").mkdir()
    (cache / "inductor" / "precompiled_headers" / "h.gch").write_bytes(b"0" * 10)
    (cache / "inductor" / "fxgraph" / "gr").mkdir(parents=True)  # one task's whole graph: never kept
    (cache / "inductor" / "fxgraph" / "gr" / "entry").write_bytes(b"graph")
    (cache / "triton" / "big").mkdir(parents=True)
    (cache / "triton" / "big" / "huge.cubin").write_bytes(b"0" * (compile_cache.MAX_FILE_BYTES + 1))
    assert compile_cache.keep(job, root, "9.9") == 2
    kept = compile_cache.kept_dir(root, "9.9")
    assert {rel for rel, _ in compile_cache._files(kept)} == {"inductor/ab/cab.cpp", "inductor/ab/cab.so"}
    assert not any(p.is_symlink() for p in kept.rglob("*")) and "host file" not in "".join(
        p.read_text(errors="replace") for p in kept.rglob("*") if p.is_file())
    # the next job gets a copy (not of a file another process is still keeping); a file it rewrites is not kept
    # over the one kept
    (kept / "inductor" / (compile_cache.TMP_PREFIX + "half")).write_bytes(b"\x7fE")
    job2 = tmp_path / "job2"
    cache2 = compile_cache.seed(job2, root, "9.9")
    assert not (cache2 / "inductor" / (compile_cache.TMP_PREFIX + "half")).exists()
    assert (cache2 / "inductor" / "ab" / "cab.cpp").read_text() == "// kernel"
    (cache2 / "inductor" / "ab" / "cab.cpp").write_text("// rewritten")
    (cache2 / "inductor" / "cd.cpp").write_text("// another")
    assert compile_cache.keep(job2, root, "9.9") == 1
    assert (kept / "inductor" / "ab" / "cab.cpp").read_text() == "// kernel"
    # at the limit nothing more is kept; another torch version has a cache of its own
    monkeypatch.setattr(compile_cache, "MAX_BYTES", 0)
    (cache2 / "inductor" / "ef.cpp").write_text("// one more")
    assert compile_cache.keep(job2, root, "9.9") == 0 and not (kept / "inductor" / "ef.cpp").exists()
    assert compile_cache.kept_dir(root, "9.8") != kept
