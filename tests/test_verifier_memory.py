"""Memory admission (issue 35): execution jobs run side by side only while the bytes their tasks plan to hold fit
the budget (verify.memory_budget_gib), a job larger than the whole budget runs alone, small jobs still run
together, and what a task held in the verifier's process (its plan, the task's module) is freed once no pending
candidate of the task is left. Verdicts do not change: every honest kernel here passes.

The bytes a plan asks the gate for are checked apart from a batch: a job's (``TaskPlan.job_bytes``: inputs, outputs,
the reference's intermediates, the float64 copy, scaled with the trial's inputs) and a task's reference timing's
(``TaskPlan.timing_bytes``: the benchmark's shape only, never more than a job), which is what a task's preparation
(``runs.prepare_task``) asks for.

The batches are real (cpu backend, compiled kernels, execution children). Which children run at the same time is
observed by wrapping the verifier's own ``_run_driven`` (the real one runs inside): the wrapper marks a candidate's
child as running and holds its start until a second child starts, a job is held back by the memory gate, or no
other job of the batch is left to start; so jobs the verifier lets run together are seen together, and jobs it
holds back cost no wait. Nothing is mocked."""

import gc
import threading
import time
import weakref

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier.execute import admission
from verifier import engine
from verifier.engine import VerifyConfig, verify_batch

COMPANY_S = 60.0  # the longest a child's start waits for another (a bound for a broken batch, never reached)


def relu_task(rows: int, cols: int, tag: str) -> Task:
    text = fx.RELU_TASK.replace("torch.randn(64, 1000)", f"torch.randn({rows}, {cols})") + f"\n# {tag}\n"
    return Task.from_code(text, name=tag, source="seed", level=1)


SMALL = Task.from_code(fx.RELU_TASK, name="small_relu", source="seed", level=1)
SMALL_MM = Task.from_code(fx.MATMUL_TASK, name="small_matmul", source="seed", level=1)
BIG = [relu_task(1024, 1024 + 16 * k, f"big-{k}") for k in range(3)]  # distinct programs, about one size
# the extra shape is drawn at random per plan (1.25x to 2x a size), so the budget below moves between runs: the
# huge task stays above twice the largest big task's plan at any draw (its smallest draw against their largest)
HUGE = relu_task(3072, 4096, "huge")
# a task whose module keeps a table larger than the plans kept after their batch may hold (engine.PLANS_KEPT_BYTES)
HEAVY = Task.from_code(fx.RELU_TASK.replace("import torch.nn as nn\n", "import torch.nn as nn\n\n"
                                            "TABLE = torch.zeros(2048, 8448)  # 66 MiB the task never reads\n"),
                       name="heavy_module_relu", source="seed", level=1)


@pytest.fixture(scope="module")
def base(shared_build_dir):
    return VerifyConfig(build_dir=shared_build_dir, trials=5, timing_trials=0,
                        warmup=1, time_torch_compile=False, run_timeout_s=60, memory_limit_gb=4)


@pytest.fixture(scope="module")
def planned(base):
    """Each task program's planned bytes (its plan is made again, and freed, by the batches below)."""
    return {t.reference_code: engine.task_plan(t.reference_code, "cpu", base).job_bytes()
            for t in [SMALL, SMALL_MM, HEAVY, HUGE, *BIG]}


@pytest.fixture(scope="module")
def config(base, planned):
    """A budget that fits one big task but not two, two small ones, and not the huge one."""
    big = [planned[t.reference_code] for t in BIG]
    budget = 2 * min(big) - (1 << 20)
    assert budget >= max(big)
    assert planned[HEAVY.reference_code] + planned[SMALL_MM.reference_code] <= budget
    assert planned[SMALL.reference_code] + planned[SMALL_MM.reference_code] <= budget
    assert planned[HUGE.reference_code] > budget
    return VerifyConfig(**{**base.__dict__, "memory_budget_gib": budget / admission.GIB})


class Overlap:
    """Wraps engine.run_driven: records the candidates' children running at once (the most bytes their tasks
    planned, the most children) and holds each child's start until another starts, a job waits at ``gate``, or
    all ``total`` candidates' children have started."""

    def __init__(self, planned: dict, gate: admission.MemoryGate, total: int):
        self.real = engine.run_driven
        self.planned, self.gate, self.total = planned, gate, total
        self.started = 0
        self.running: dict[int, str] = {}
        self.most_jobs = 0
        self.most_bytes = 0
        self.cond = threading.Condition()

    def __call__(self, job, job_dir, timeout_s, cfg, on_trial=None, harness=None, on_build=None, on_seed=None,
                 on_child_end=None):
        if job.kind != "candidate":
            return self.real(job, job_dir, timeout_s, cfg, on_trial, harness, on_build, on_seed, on_child_end)
        me = id(job)
        with self.cond:
            self.running[me] = job.reference_code
            self.started += 1
            self.most_jobs = max(self.most_jobs, len(self.running))
            self.most_bytes = max(self.most_bytes, sum(self.planned[t] for t in self.running.values()))
            self.cond.notify_all()
            deadline = time.monotonic() + COMPANY_S  # the gate does not notify this condition: looked at often
            while not (len(self.running) >= 2 or self.gate.waiting or self.started >= self.total) \
                    and time.monotonic() < deadline:
                self.cond.wait(0.05)
        try:
            return self.real(job, job_dir, timeout_s, cfg, on_trial, harness, on_build, on_seed, on_child_end)
        finally:
            with self.cond:
                del self.running[me]


def run_batch(tasks_and_ids, config, planned, monkeypatch, on_verdict=None):
    probe = Overlap(planned, admission.gate_for("cpu", config.memory_budget_gib), len(tasks_and_ids))
    monkeypatch.setattr(engine, "run_driven", probe)
    items = [(t, Candidate(candidate_id=cid, task_id=t.task_id, backend="cpu", generator="test", code=fx.HONEST_RELU
                           if "relu" in t.reference_code else fx.HONEST_MATMUL)) for t, cid in tasks_and_ids]
    verdicts = verify_batch(items, config=config, compile_workers=2, on_verdict=on_verdict)
    return verdicts, probe


class GateRun:
    """Requests to a real MemoryGate from threads, each holding its bytes until told to leave, on the gate's clock
    moved by hand (``clock``): how long a request has waited is never the host's speed."""

    def __init__(self, monkeypatch, budget: int):
        run = self

        class Clock:
            t = 1000.0

            def monotonic(self):
                return self.t

            def perf_counter(self):
                return time.perf_counter()

        self.clock = Clock()
        monkeypatch.setattr(admission, "time", self.clock)
        self.gate = admission.MemoryGate(budget)
        self.order: list[str] = []
        self.holds: dict[str, threading.Event] = {}
        self.threads: list[threading.Thread] = []

        def take(name: str, n: int, background: bool):
            with run.gate.admit(n, background=background):
                run.order.append(name)
                run.holds[name].wait()
        self._take = take

    def start(self, name: str, n: int, background: bool = False) -> None:
        self.holds[name] = threading.Event()
        self.threads.append(threading.Thread(target=self._take, args=(name, n, background)))
        self.threads[-1].start()

    def leave(self, names: str) -> None:
        for k in names:
            self.holds[k].set()

    def wait_until(self, pred) -> None:
        deadline = time.monotonic() + 30  # a bound on a broken gate, not a timing assertion
        while not pred() and time.monotonic() < deadline:
            time.sleep(0.002)
        assert pred(), (self.order, self.gate.admitted, self.gate.waiting)

    def join(self) -> None:
        for t in self.threads:
            t.join(30)


def test_memory_gate_admits_in_order_within_its_budget_and_a_passed_request_is_passed_for_a_bounded_time(
        monkeypatch):
    """The gate itself: a request that does not fit waits; a later one that fits may pass it only while it has
    waited less than BYPASS_S (a strict order held a 0.3 GiB job 43 s behind a large one on one H200); after that
    nothing behind it is admitted first, and it is admitted once the holders before it leave. A request larger
    than the budget waits for an empty gate and then holds it alone."""
    r = GateRun(monkeypatch, 100)
    gate, order = r.gate, r.order
    r.start("a", 60)
    r.wait_until(lambda: order == ["a"])
    r.start("b", 60)
    r.wait_until(lambda: gate.waiting == 1)
    r.start("c", 10)
    r.wait_until(lambda: order == ["a", "c"])  # c fits beside a and passes b, which has not waited BYPASS_S yet
    r.clock.t += admission.BYPASS_S  # b has now waited BYPASS_S
    r.start("d", 10)
    r.wait_until(lambda: gate.waiting == 2)
    assert order == ["a", "c"] and gate.admitted == 70  # d fits too, yet waits behind b
    r.leave("a")
    r.wait_until(lambda: order == ["a", "c", "b", "d"])  # both admitted once a left, b first
    assert gate.admitted == 80
    r.start("e", 500)
    r.wait_until(lambda: gate.waiting == 1)
    r.clock.t += admission.BYPASS_S
    r.start("f", 1)
    r.wait_until(lambda: gate.waiting == 2)
    r.leave("bcd")
    r.wait_until(lambda: "e" in order)
    assert gate.admitted == gate.budget and gate.waiting == 1 and "f" not in order  # e alone, f waits
    r.leave("ef")
    r.join()
    assert order == ["a", "c", "b", "d", "e", "f"] and gate.admitted == 0 and gate.peak == gate.budget


def test_a_background_request_enters_only_with_nobody_in_line_and_never_holds_anyone_up(monkeypatch):
    """A task's torch.compile timing (runs.prepare_task) asks in the background: no candidate waits for it, so it
    never goes before a request in line, and one that waits in line holds up nobody, however long it has waited
    (a request in the foreground that waited BYPASS_S does)."""
    r = GateRun(monkeypatch, 100)
    gate, order = r.gate, r.order
    r.start("a", 60)
    r.wait_until(lambda: order == ["a"])
    r.start("b", 60)  # a candidate's job: does not fit beside a
    r.wait_until(lambda: gate.waiting == 1)
    r.start("c", 10, background=True)  # fits beside a, but b is in line
    r.wait_until(lambda: gate.waiting == 2)
    r.start("d", 20)  # fits, and passes both (b has waited less than BYPASS_S)
    r.wait_until(lambda: order == ["a", "d"])
    assert gate.waiting == 2  # c fits beside a and d (90) and still waits: b is in line
    r.leave("a")
    r.wait_until(lambda: order == ["a", "d", "b", "c"])  # b once a left, then c: nobody in line any more
    r.start("f", 30, background=True)  # does not fit (120)
    r.wait_until(lambda: gate.waiting == 1)
    r.clock.t += 10 * admission.BYPASS_S  # f has waited long: still, nothing waits behind it
    r.start("g", 5)
    r.wait_until(lambda: order == ["a", "d", "b", "c", "g"])
    assert gate.waiting == 1 and gate.admitted == 95
    r.leave("bcdg")
    r.wait_until(lambda: order[-1] == "f")
    r.leave("f")
    r.join()
    assert gate.admitted == 0 and gate.waiting == 0
    with pytest.raises(ValueError, match="foreground"):  # a slot's process never asks in the background
        admission._AskedGate(None, "cuda", 0.0).admit(1, background=True)


def test_large_tasks_are_serialised_within_the_memory_budget(config, planned, monkeypatch):
    """Three tasks of which two do not fit the budget together, three execution workers: their children run one
    at a time (without admission they ran together) and every honest kernel passes."""
    cfg = VerifyConfig(**{**config.__dict__, "exec_workers": 3})
    verdicts, probe = run_batch([(t, f"big-{k}") for k, t in enumerate(BIG)], cfg, planned, monkeypatch)
    assert [v.status for v in verdicts] == ["pass"] * 3, [v.feedback for v in verdicts]
    budget = admission.gate_for("cpu", cfg.memory_budget_gib).budget
    assert probe.most_jobs == 1 and probe.most_bytes <= budget


def test_a_task_larger_than_the_budget_runs_alone_and_small_ones_still_run(config, planned, monkeypatch):
    """A task planned above the whole budget is not refused and does not stall the batch: it runs with nothing
    beside it, and the small task of the same batch runs before or after it."""
    cfg = VerifyConfig(**{**config.__dict__, "exec_workers": 2})
    verdicts, probe = run_batch([(HUGE, "huge"), (SMALL, "small")], cfg, planned, monkeypatch)
    assert [v.status for v in verdicts] == ["pass", "pass"], [v.feedback for v in verdicts]
    assert probe.most_jobs == 1


@pytest.fixture(scope="module")
def small_batch(config, planned):
    """Two candidates of the heavy-module task and one of a small task, two execution workers; at each verdict,
    whether each task's plan is still cached, and a weak reference to each plan's task module."""
    cfg = VerifyConfig(**{**config.__dict__, "exec_workers": 2})
    items = [(HEAVY, "relu-1"), (SMALL_MM, "matmul-1"), (HEAVY, "relu-2")]
    keys = {t.task_id: engine._plan_key(t.reference_code, "cpu", cfg) for t, _ in items}
    seen: list[tuple[str, bool, bool, str]] = []  # task, another candidate of it pending, plan cached, candidate
    modules: dict[str, weakref.ref] = {}
    lock = threading.Lock()

    def on_verdict(i, v):
        with lock:
            task_id = items[i][0].task_id
            others_pending = any(t.task_id == task_id and not any(s[3] == cid for s in seen)
                                 for k, (t, cid) in enumerate(items) if k != i)
            plan = engine._PLANS.get(keys[task_id])
            if plan is not None:
                modules.setdefault(task_id, weakref.ref(plan.ref_mod))
            seen.append((task_id, others_pending, plan is not None, items[i][1]))

    with pytest.MonkeyPatch.context() as mp:
        verdicts, probe = run_batch(items, cfg, planned, mp, on_verdict=on_verdict)
    kept_after = {t.task_id: keys[t.task_id] in engine._PLANS for t, _ in items}
    return verdicts, probe, seen, modules, kept_after


def test_small_tasks_still_run_side_by_side(small_batch):
    """Small tasks whose planned bytes fit the budget together are admitted together: two children ran at once."""
    verdicts, probe, *_ = small_batch
    assert [v.status for v in verdicts] == ["pass"] * 3, [v.feedback for v in verdicts]
    assert probe.most_jobs == 2
    # timing is off in this batch (timing_trials=0): the feedback says so, and no speedup is claimed
    for v in verdicts:
        assert "timing_trials=0" in v.feedback and "Timing failed" not in v.feedback, v.feedback
        assert v.speedup_eager is None


def test_a_task_plan_is_freed_when_no_candidate_of_the_task_is_pending(small_batch):
    """A task's plan stays while a candidate of the task is pending; with its last verdict a plan whose module
    holds much (66 MiB here) leaves the verifier's process with the module, while a small one is kept for the
    next batch. Before, every plan and its module were kept for the life of the process (issue 35)."""
    _, _, seen, modules, kept_after = small_batch
    heavy = [(pending, cached) for task_id, pending, cached, _ in seen if task_id == HEAVY.task_id]
    assert heavy == [(True, True), (False, False)], seen
    assert kept_after == {HEAVY.task_id: False, SMALL_MM.task_id: True}
    assert HEAVY.task_id in modules
    gc.collect()
    assert modules[HEAVY.task_id]() is None, "the heavy task's module is still alive after its last verdict"


def test_plans_nobody_holds_are_kept_within_bounds():
    """The plan cache's bounds: held values are never dropped; unheld ones are kept least recently used first
    within a count and a byte bound, and a value larger than the byte bound is dropped with its last holder."""
    cache = admission.HeldCache(keep=2, keep_bytes=100, size=lambda v: v)
    for key, size in (("a", 10), ("b", 10), ("big", 500)):
        cache.hold(key)
        assert cache.get_or_build(key, lambda size=size: size) == size
    assert "big" in cache  # held: kept whatever its size
    assert cache.release("big") and "big" not in cache
    cache.release("a")
    cache.release("b")
    assert "a" in cache and "b" in cache
    cache.get_or_build("a", lambda: 0)  # a used again: b is now the least recently used
    cache.get_or_build("c", lambda: 10)  # built with no holder: kept within the bounds, b leaves
    assert ("a" in cache, "b" in cache, "c" in cache) == (True, False, True)


def test_the_float64_reference_is_left_out_when_its_outputs_would_not_fit():
    """A task whose float64 outputs (twice the fp32 ones, per draw) would not fit beside what the plan holds gets
    the fixed tolerance and says why; with room it runs (a 4 GiB-input conv whose float64 output is 16 GiB ran the
    H100 out of memory while 4 execution workers ran: test bed, technoabsurdist-l1-p87)."""
    import torch

    from verifier.engine import _float64_check

    model = torch.nn.Linear(64, 256)
    x = [torch.randn(8, 64)]
    outs = [[model(x[0]).detach()]]
    cfg = VerifyConfig(float64_reference=True)
    small, room = 4 * (8 * 64 * 4 + 8 * 256 * 4), 1 << 30
    why, pooled, outs64 = _float64_check(model, [x], outs, 8 * 64 * 4, small, cfg)
    assert "does not fit" in why and outs64 is None
    why, pooled, outs64 = _float64_check(model, [x], outs, 8 * 64 * 4, room, cfg)
    assert why == "" and outs64[0][0].dtype == torch.float64 and len(pooled) == 1

    class Short(torch.nn.Module):
        """A float64 forward the device's memory fails in the driver's or a library's wording, not torch's type: that
        is the device's memory (a missed estimate), not a reference without a float64 kernel."""

        def __init__(self, message: str):
            super().__init__()
            self.message, self.lin = message, torch.nn.Linear(64, 256)

        def forward(self, x):
            if x.dtype == torch.float64:
                raise RuntimeError(self.message)
            return self.lin(x)

    for message, why_part in (("cuMemCreate failed: CUDA driver error 2 (CUDA_ERROR_OUT_OF_MEMORY)", "ran out of"),
                              ("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
                               "ran out of"),
                              ('"addmm_impl_cpu_" not implemented for \'Double\'', "does not run in float64")):
        short = Short(message)
        why, _, outs64 = _float64_check(short, [x], [[short(x[0]).detach()]], 8 * 64 * 4, room, cfg)
        assert why_part in why and outs64 is None, (message, why)


def test_a_task_is_refused_for_the_device_it_needs_not_for_the_memory_other_jobs_hold(base, monkeypatch):
    """KernelBench's Softsign (6 GiB of inputs) was skipped on an H100 with 18.8 GiB free while three other jobs
    ran: the plan, cached for the task, made every candidate a verifier_error. Free memory is now read once the
    memory gate admits the planning; a task is refused only when a trial cannot fit the whole device."""
    task = relu_task(512, 1024 + 8, "busy-device")  # 2 MiB of inputs; a program no other test plans
    monkeypatch.setattr(admission, "free_bytes", lambda device: 1 << 20)  # the other jobs hold the rest now
    p = engine.task_plan(task.reference_code, "cpu", base)
    assert p.skip_reason == "" and p.input_bytes == 512 * 1032 * 4  # before: skipped, "0.0 GiB free"
    assert p.float64 != ""  # the float64 copy still reads what is free once admitted: too little here
    # a trial that would not fit the whole device is still refused, and the reason names the device's size
    monkeypatch.setattr(admission, "capacity_bytes", lambda device: 4 << 20)
    other = relu_task(512, 1024 + 16, "too-big-device")
    p = engine.task_plan(other.reference_code, "cpu", base)
    assert p.skip_reason.startswith("skipped: the task's inputs take") and "GiB in all" in p.skip_reason


def test_a_jobs_bytes_count_its_references_intermediates():
    """A task's job is admitted by its forward's intermediates too (TaskPlan.work_bytes, measured on cuda when the
    task is planned: tests/gpu/test_verifier_gpu.py), once for each forward that holds them, twice more with the
    float64 reference; scaled with the trial's inputs."""
    from verifier.judge.plan import TaskPlan

    base = dict(ref_mod=None, text="", device="cuda", input_bytes=1 << 20, output_bytes=1 << 20, float64="")
    light, heavy = TaskPlan(**base), TaskPlan(**base, work_bytes=1 << 30)
    assert heavy.job_bytes() - light.job_bytes() == (admission.WORK_COPIES + admission.FLOAT64_FACTOR) << 30
    fixed = dict(base, float64="no float64 reference")
    assert TaskPlan(**fixed, work_bytes=1 << 30).job_bytes() - TaskPlan(**fixed).job_bytes() == \
        admission.WORK_COPIES << 30
    scaled = TaskPlan(**base, work_bytes=1 << 30, trial_scale=2.0)
    assert scaled.job_bytes() - TaskPlan(**base, trial_scale=2.0).job_bytes() == \
        2 * (admission.WORK_COPIES + admission.FLOAT64_FACTOR) << 30


def test_a_reference_timing_plans_for_the_benchmarks_shape_without_the_judge():
    """A task's reference timing (runs.prepare_task) is admitted for what its child and the harness hold: the
    benchmark's shape (the extra shape, the float64 copy and the judge's copies are a candidate's job's), its
    intermediates once in each process, the harness's bracket sets; never more than a candidate's job."""
    from verifier.judge.plan import TaskPlan

    gib = 1 << 30
    base = dict(ref_mod=None, text="", device="cuda", input_bytes=gib // 4, output_bytes=gib, work_bytes=4 * gib)
    big = TaskPlan(**base, float64="", trial_scale=1.5, other_shape='{"dims": 1}', other_output_bytes=3 * gib // 2)
    plain = TaskPlan(**base, float64="no float64 reference")
    assert big.timing_bytes() == plain.timing_bytes()  # neither the extra shape nor the float64 copy counts
    sets = max(admission.HARNESS_SETS_BYTES["cuda"], 2 * (gib // 4 + gib))
    assert big.timing_bytes() == (2 * (gib // 4) + 3 * gib + 2 * (4 * gib) + sets + admission.PROCESS_BYTES)
    assert big.timing_bytes() < big.job_bytes() / 2  # 13.75 GiB against 34.6
    # a small task's timing would plan more than its job (the harness's bracket sets): its job's bytes cap it
    small = TaskPlan(ref_mod=None, text="", device="cuda", input_bytes=1 << 20, output_bytes=1 << 20, float64="")
    assert small.timing_bytes() == small.job_bytes()
    mid = dict(ref_mod=None, text="", input_bytes=64 << 20, output_bytes=64 << 20, work_bytes=2 * gib, float64="")
    assert TaskPlan(**mid, device="cuda").timing_bytes() - TaskPlan(**mid, device="cpu").timing_bytes() == \
        admission.HARNESS_SETS_BYTES["cuda"] - admission.HARNESS_SETS_BYTES["cpu"]  # the harness's sets by device


def test_a_tasks_preparation_asks_the_gate_for_its_reference_timing_not_a_candidates_job(monkeypatch, tmp_path):
    """A big task's preparation charged a candidate's job (its extra shape, float64 copy and judge) waited for
    memory beside two busy slots of eight on an H100 (0dae5de), and held its candidate 144 s in the ready queue:
    the gate is asked for the plan's ``timing_bytes``."""
    from verifier import runs

    code = fx.RELU_TASK.replace("torch.randn(64, 1000)", "torch.randn(2048, 4096)") + "\n# prep bytes\n"
    asked = []

    class Recording(admission.MemoryGate):
        def acquire(self, n: int, background: bool = False) -> None:
            asked.append(n)
            super().acquire(n, background)

    gate = Recording(1 << 40)
    monkeypatch.setattr(admission, "gate_for", lambda *a, **k: gate)
    timed = []
    monkeypatch.setattr(runs, "eager_timing", lambda plan, *a: timed.append(gate.admitted))
    monkeypatch.setattr(runs, "timing_to_measure", lambda *a: False)
    cfg = VerifyConfig(build_dir=str(tmp_path), timing_trials=3, time_torch_compile=False)
    key = ("prep-bytes", code)
    runs._PLANS.hold(key)
    try:
        assert runs.prepare_task(key, code, "cpu", cfg, tmp_path, "prep-bytes") is False
    finally:
        runs._PLANS.release(key)
    plan = runs.task_plan(code, "cpu", cfg, "prep-bytes")
    assert plan.timing_bytes() < plan.job_bytes()
    assert timed == [plan.timing_bytes()] and asked[-1] == plan.timing_bytes(), (asked, plan.timing_bytes())
    assert gate.admitted == 0
