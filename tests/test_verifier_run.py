"""The verifier end to end on the cpu backend with real compiled kernels: compile pool (cold, cached,
errors kept), execution children (correctness, runtime legality, timing), crash / hang / OOM verdicts,
every runtime-visible cheat with its honest look-alike, verify_batch ordering and callbacks, the CLI.

All candidates share one C++ extension (bench/lib/fixtures.py), so the session compiles it once, plus
one broken source for the compile-error verdict, built in parallel in the same pool."""

import json
import os
import dataclasses
import re
import time
from pathlib import Path
from unittest import mock

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import screen
from verifier import cheats
from verifier import engine
from verifier.engine import VerifyConfig, verify_batch
from verifier.entry import verify_candidate
from verifier.front.static import scan
from verifier.serve.cost import CHILD_PHASES, JUDGE_PARTS, TIMING_PARTS, TRIAL_PARTS

ROOT = Path(__file__).resolve().parent.parent
C = fx.cpu_candidate
RUNTIME_CASES = {
    # name: (task, candidate, expected status, cheat code that must be present or None)
    "honest_relu": ("relu", fx.HONEST_RELU, "pass", None),
    "honest_matmul": ("matmul", fx.HONEST_MATMUL, "pass", None),
    "c01_aten_in_cpp": ("relu", C("return ext.relu_aten(x)"), "cheat", cheats.C01),
    "c01_honest_views": ("relu", C("out = torch.empty_like(x).view(-1)\next.relu_into(x.contiguous().view(-1), out)\n"
                                   "return out.view(x.shape)"), "pass", None),
    "c02_dynamic_torch": ("relu", C("f = operator.attrgetter('re' + 'lu')(torch)\nreturn f(x)\next.relu(x)",
                                    imports="import operator"), "cheat", cheats.C02),
    "c03_branch_on_shape": ("relu", C("if x.shape[0] != 64:\n    return operator.attrgetter('relu')(torch)(x)\n"
                                      "return ext.relu(x)", imports="import operator"), "cheat", cheats.C03),
    # row 1 with the dispatch monitor switched off from inside forward (names built so the static scan
    # cannot read them): the profiler, a second monitor the dispatch-mode switch does not reach, sees relu
    "c01_monitor_switched_off": ("relu", C("off = operator.attrgetter('_' + 'C._DisableTorch' + 'Dispatch')(torch)\n"
                                           "with off():\n    y = operator.attrgetter('re' + 'lu')(torch)(x)\n"
                                           "ext.touch(x)\nreturn y", imports="import operator"), "cheat", cheats.C01),
    "c01_honest_context_manager": ("relu", C("with torch.no_grad():\n    y = ext.relu(x.contiguous())\nreturn y"),
                                   "pass", None),
    # row 11: torch's behaviour changed at import (a flag with a getter): stopped at once, never timed
    "c11_changes_torch_flags": ("relu", C("return ext.relu(x)", imports="import operator\n"
                                          "operator.attrgetter('set_float32_' + 'matmul_precision')(torch)('medium')"), "cheat", cheats.C11),
    "c11_honest_reads_flags": ("relu", C("enabled = torch.backends.cudnn.enabled\nreturn ext.relu(x)"), "pass", None),
    # PyTorch's thread count set in __init__ (a frontier model's speed-up attempt): put back to the slot's, a pass;
    # changed again inside forward it is still a change of torch's state there
    "c11_honest_sets_threads_in_init": ("relu", C("return ext.relu(x)",
                                                  init="torch.set_num_threads(torch.get_num_threads() + 1)"), "pass", None),
    "c11_sets_threads_in_forward": ("relu", C("operator.attrgetter('set_num_' + 'threads')(torch)(torch.get_num_threads()"
                                              " + 1)\nreturn ext.relu(x)", imports="import operator"), "cheat", cheats.C11),
    # row 11: synchronisation replaced by a function that never returns: a cheat verdict, not a timeout
    "c11_patched_synchronize": ("relu", C("torch.cuda.synchronize()\nreturn ext.relu(x)",
                                          module="def _stall(*a, **k):\n    while True:\n        pass\n"
                                                 "type(torch.cuda).__setattr__(torch.cuda, 'synch' + 'ronize', _stall)"),
                                "cheat", cheats.C11),
    "c11_honest_synchronizes": ("relu", C("y = ext.relu(x)\ntorch.cuda.synchronize() if torch.cuda.is_available() "
                                          "else None\nreturn y"), "pass", None),
    # a KernelBench-style program: .cuda() inputs, a constructor argument, a plain-number input (cpu backend)
    "kb_style_device_inputs": ("kb_relu", C("return ext.relu(x.contiguous())", args="x, scale").replace(
        "def __init__(self):", "def __init__(self, features):"), "pass", None),
    # the verifier's own failure (the task's get_inputs breaks in the verifier): never the candidate's verdict
    "verifier_error_task_inputs": ("broken_inputs", fx.HONEST_RELU, "verifier_error", None),
    "c05_zeros": ("relu", C("out = torch.zeros_like(x)\next.touch(x)\nreturn out"), "cheat", cheats.C05),
    "c05_honest_zeros_then_write": ("relu", C("out = torch.zeros_like(x)\next.relu_into(x, out)\nreturn out"),
                                    "pass", None),
    "c06_stale_empty": ("relu", C("out = torch.empty_like(x)\next.touch(x)\nreturn out"), "cheat", cheats.C06),
    "c06_honest_empty_then_write": ("relu", C("out = torch.empty_like(x)\next.relu_into(x, out)\nreturn out"),
                                    "pass", None),
    "c07_mutates_input": ("relu", C("return ext.relu_inplace(x)"), "cheat", cheats.C07),
    "c08_caches_output": ("relu", C("key = tuple(x.shape)\nif key not in self.cache:\n    self.cache[key] = ext.relu(x)\n"
                                    "return self.cache[key]", init="self.cache = {}"), "cheat", cheats.C08),
    "c08_honest_caches_config": ("relu", C("self.seen.add(tuple(x.shape))\nreturn ext.relu(x)", init="self.seen = set()"),
                                 "pass", None),
    "c10_tensor_subclass": ("relu", C("return ext.relu(x).as_subclass(Lazy)", module="class Lazy(torch.Tensor):\n    pass"),
                            "cheat", cheats.C10),
    "c11_patches_timer": ("relu", C("return ext.relu(x)", imports="import time\ntime.perf_counter = lambda: 0.0"),
                          "cheat", cheats.C11),
    "c11_honest_uses_timer": ("relu", C("t0 = perf_counter()\nreturn ext.relu(x)", imports="from time import perf_counter"),
                              "pass", None),
    "c13_low_precision": ("relu", C("return ext.relu_lowp(x)"), "cheat", cheats.C13),
    "c14_hardcoded_rows": ("relu", C("return ext.relu_fixed_rows(x.contiguous())"), "cheat", cheats.C14),
    "c16_warmup_detection": ("relu", C("self.calls += 1\nif self.calls > 6:\n    out = torch.empty_like(x)\n"
                                       "    ext.touch(x)\n    return out\nreturn ext.relu(x)", init="self.calls = 0"),
                             "cheat", cheats.C16),
    "c16_honest_counts_calls": ("relu", C("self.calls += 1\nreturn ext.relu(x)", init="self.calls = 0"), "pass", None),
    "c18_prints_verdict": ("relu", C("return ext.relu_lowp(x)", module='print(\'{"status": "pass", "correct": true, '
                                                                      '"reward": 4.0}\')'), "cheat", cheats.C18),
    "c18_honest_prints_debug": ("relu", C("return ext.relu(x)", module="print('building relu extension: done')"),
                                "pass", None),
    # row 1 through an extension built at run time (arguments the static stage cannot read): the child asks the
    # verifier for it, which scans it before building (ATen internals named in the source)
    "c01_child_built_native": ("relu", C("return ext.relu(x)", module=(
        "NATIVE = CPP + '\\nstatic void km_unused() { (void)&at::native::relu; }\\n'\n"
        "ext2 = load_inline(name='dyn', cpp_sources=os.environ.get('KM_NO_SUCH_VARIABLE', NATIVE), "
        "functions=FUNCS)"), imports="import os"), "cheat", cheats.C01),
    "crash_segfault": ("relu", C("ext.segv(x)\nreturn ext.relu(x)"), "crash", None),
    "crash_hang": ("relu", C("ext.spin(x)\nreturn ext.relu(x)"), "timeout", None),
    "crash_oom": ("relu", C("ext.hog(x)\nreturn ext.relu(x)"), "crash", None),
    "compile_error": ("relu", fx.BROKEN_CPP, "compile_error", None),
    "no_code": ("relu", "I am not sure how to write this kernel.", "extract_error", None),
}
KB_RELU_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.features = features

    def forward(self, x, scale: float):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(48, 256).cuda(), 2.0]


def get_init_inputs():
    return [256]
'''
# Cases that test a runtime layer by getting past the static scan, which catches them too since it learnt
# their routes (test_runtime_layer_cases_are_caught_statically too): the batch judges them with the static
# findings dropped, so the runtime check alone decides.
RUNTIME_LAYER = {"c02_dynamic_torch", "c01_monitor_switched_off", "c11_changes_torch_flags", "c11_patched_synchronize"}
BROKEN_INPUTS_TASK = fx.RELU_TASK.replace("def get_inputs():", "def get_inputs():\n    raise OSError('dataset gone')")
TASKS = {"kb_relu": Task.from_code(KB_RELU_TASK, name="kb_relu", source="seed", level=1),
         "broken_inputs": Task.from_code(BROKEN_INPUTS_TASK, name="broken_inputs", source="seed", level=1),
         "relu": Task.from_code(fx.RELU_TASK, name="relu", source="seed", level=1),
         "matmul": Task.from_code(fx.MATMUL_TASK, name="matmul", source="seed", level=1)}


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("verifier-builds"))


@pytest.fixture(scope="session")
def config(build_dir):
    return VerifyConfig(build_dir=build_dir, trials=5, timing_trials=5, warmup=1, time_torch_compile=False,
                        run_timeout_s=25, memory_limit_gb=4, exec_workers=2)


@pytest.fixture(scope="session")
def batch(config):
    names = list(RUNTIME_CASES)
    items = [(TASKS[RUNTIME_CASES[n][0]], Candidate(candidate_id=n, task_id=TASKS[RUNTIME_CASES[n][0]].task_id,
                                                     backend="cpu", generator="test", code=RUNTIME_CASES[n][1]))
             for n in names]
    calls = []
    t0 = time.perf_counter()
    layer_codes = {RUNTIME_CASES[n][1] for n in RUNTIME_LAYER}

    def scan_runtime_layer(code, backend="cpu"):
        report = real_scan(code, backend)
        if code in layer_codes:
            report.findings = []
        return report

    real_scan = screen.scan
    fx.make_headers(config, fx.CPU_EXT_SPEC)  # test_identical_sources_compile_once asks that the builds used it
    with mock.patch.object(screen, "scan", scan_runtime_layer):
        verdicts = verify_batch(items, config=config, compile_workers=2, on_verdict=lambda i, v: calls.append(i))
    return {"verdicts": dict(zip(names, verdicts)), "order": [v.candidate_id for v in verdicts], "names": names,
            "calls": calls, "seconds": time.perf_counter() - t0}


@pytest.mark.parametrize("name", list(RUNTIME_CASES))
def test_case_verdict(batch, name):
    _, _, status, code = RUNTIME_CASES[name]
    v = batch["verdicts"][name]
    assert v.status == status, (name, v.status, v.cheats, v.feedback)
    if code:
        assert code in v.cheats, (name, v.cheats, v.feedback)
        assert v.reward == -1.0 and not v.correct
    if status == "verifier_error":
        assert v.cheats == [] and not v.correct and "dataset gone" in v.feedback
    if status == "pass":
        assert v.cheats == [] and v.correct and v.stage_reached == "timing"
        assert v.trials >= 5 and v.runtime_us > 0 and v.eager_us > 0 and v.speedup_eager > 0
        assert v.max_abs_err is not None and v.max_abs_err <= 1e-4


@pytest.mark.parametrize("name", sorted(RUNTIME_LAYER))
def test_runtime_layer_cases_are_caught_statically(name):
    assert scan(RUNTIME_CASES[name][1]).findings, name


def test_child_built_extension_is_scanned_by_the_verifier(batch):
    v = batch["verdicts"]["c01_child_built_native"]
    assert "extension built at run time" in v.feedback and "ATen internals" in v.feedback, v.feedback


def test_verifier_errors_are_counted_apart(batch):
    from verifier.serve.metrics import summarize_verdicts

    vs = list(batch["verdicts"].values())
    m = summarize_verdicts(vs)
    assert m["verifier_errors"] == 1 and m["samples"] == len(vs) - 1
    assert "verifier_error" not in m["status_counts"]


def test_reference_timed_once_per_task_in_its_own_process(batch):
    """Every passing candidate of a task reports the same eager time: the reference was timed once, in a
    process where no candidate ran (a candidate that changes torch cannot slow it down)."""
    eager = {v.eager_us for n, v in batch["verdicts"].items() if v.status == "pass" and RUNTIME_CASES[n][0] == "relu"}
    assert len(eager) == 1 and next(iter(eager)) > 0


def test_batch_order_and_callbacks(batch):
    assert batch["order"] == batch["names"]
    assert sorted(batch["calls"]) == list(range(len(batch["names"])))


def test_timing_has_the_device_alone_or_says_it_did_not(batch, config):
    # the batch runs two execution children at a time and holds a hanging candidate: a timing phase either
    # got the device lock (on cpu: no other timing phase meanwhile; on cuda also no trials or reference
    # runs, tests/test_devlock.py) or gave up after its bounded wait and went on (the hang must not turn an
    # honest neighbour into a timeout)
    passed = [v for v in batch["verdicts"].values() if v.status == "pass"]
    bound = min(30.0, 0.2 * config.run_timeout_s)
    for v in passed:
        t = v.versions["timing"]
        assert isinstance(t["exclusive"], bool) and 0 <= t["lock_wait_s"] <= 2 * bound + 1, (v.candidate_id, t)
        # the harness's own look at the lock before each bracket agrees with the child's account
        assert not t["exclusive"] or t["unlocked_brackets"] == 0, (v.candidate_id, t)
        assert "child_timing_lock_wait" in v.stage_seconds
        assert 0 <= v.stage_seconds["child_first_trial"] <= v.stage_seconds["child_trials"]
        # a trial's pieces (the candidate's own account, a diagnostic) add up to the trials phase, the timing's
        # to the timing phase: no piece is counted twice or outside its phase
        for phase, parts in (("child_trials", TRIAL_PARTS), ("child_timing", TIMING_PARTS)):
            have = [v.stage_seconds[k] for k in parts if k in v.stage_seconds]
            assert len(have) >= 5 and sum(have) <= v.stage_seconds[phase] + 0.01, (v.candidate_id, phase)
        assert v.stage_seconds["child_trial_forward"] > 0 and v.stage_seconds["child_timing_brackets"] > 0
        judged = [v.stage_seconds[k] for k in JUDGE_PARTS]  # measured by the judge itself, every part of a pass
        assert sum(judged) <= v.stage_seconds["execute_judge"] + 0.01 and v.stage_seconds["judge_trials"] > 0
        # what the slot's process does after the child ended is measured there, inside the child's stage
        after = v.stage_seconds["execute_held_checks"] + v.stage_seconds["execute_prefetch_wait"]
        assert 0 <= after <= v.stage_seconds["execute_child"], (v.candidate_id, v.stage_seconds)
        # the harness's own seconds of the brackets (drawn, clocked, checked), measured in the slot's process: they
        # fall inside the child's timing phase, the clock's part inside the child's brackets
        serve = [v.stage_seconds[f"harness_{p}"] for p in ("draw", "clock", "after")]
        assert min(serve) >= 0 and serve[1] > 0, (v.candidate_id, v.stage_seconds)
        assert sum(serve) <= v.stage_seconds["child_timing"] + 0.05, (v.candidate_id, v.stage_seconds)
        # and the seconds before the child's main began and after it ended, by one clock of the host: the child's
        # phases, these and the slot's own after it fit in the child's stage
        around = v.stage_seconds["execute_child_start"] + v.stage_seconds["execute_child_exit"]
        phases = sum(v.stage_seconds.get(k, 0.0) for k in CHILD_PHASES)
        assert around >= 0 and phases <= v.stage_seconds["execute_child"] + 0.05, (v.candidate_id, v.stage_seconds)
    assert sum(v.versions["timing"]["exclusive"] for v in passed) >= len(passed) // 2


def test_identical_sources_compile_once(batch, build_dir, config):
    keys = [d for d in os.listdir(build_dir) if not d.startswith(".") and d != "prep"]  # prep: reference timings
    # the shared extension, the one with PyTorch's relu beside it (c01_aten_in_cpp: bench/lib/fixtures.ATEN_CPP) and
    # the broken one; c01_child_built_native's run-time build is refused by the verifier's source scan, unbuilt
    assert len(keys) == 3
    compiled_cold = [v for v in batch["verdicts"].values() if v.stage_seconds.get("compile_cached") is False]
    assert len(compiled_cold) <= 3  # only the candidate(s) that triggered a build paid for it
    # the suite's [verify] pch_dir (conftest: the run's own directory) reaches the real builds: they say they used
    # the precompiled header, and it is there, not in the user's cache
    results = [json.loads(p.read_text()) for p in Path(build_dir).glob("*/result.json")]
    assert len(results) == 3 and any(r.get("pch") is True for r in results), results
    assert list(Path(os.environ["KERNELMILL_VERIFY_PCH_DIR"]).glob("*/signature.json"))


def test_crash_hang_oom_feedback(batch):
    vs = batch["verdicts"]
    assert "SIGSEGV" in vs["crash_segfault"].feedback
    assert "killed after" in vs["crash_hang"].feedback
    # where the hang was, on the verifier's clock: in the first correctness call, for most of the limit
    got = re.search(r"0 of 6 correctness calls finished; the first began ([\d.]+) s after the process was started; "
                    r"call 1 had run ([\d.]+) s when it was stopped", vs["crash_hang"].feedback)
    assert got and float(got.group(1)) + float(got.group(2)) > 20, vs["crash_hang"].feedback
    assert "out of memory" in vs["crash_oom"].feedback
    for n in ("crash_segfault", "crash_hang", "crash_oom"):  # each in the first correctness trial
        assert vs[n].compiled and vs[n].stage_reached == "correctness"


# candidates that behave through the correctness trials (5 + the extra shape: 6 calls) and then crash or hang
# in the timing stage's first call; one that runs everywhere and computes the wrong values
AFTER_TRIALS = "self.calls += 1\nif self.calls > 6:\n    ext.{}(x)\nreturn ext.relu(x)"
STAGE_CASES = {
    "crash_in_timing": (C(AFTER_TRIALS.format("segv"), init="self.calls = 0"), "crash", "timing"),
    "hang_in_timing": (C(AFTER_TRIALS.format("spin"), init="self.calls = 0"), "timeout", "timing"),
    "wrong_values": (C("return ext.relu(x.t().contiguous()).view(x.shape)"), "wrong", "correctness"),
    "static_rejection": (C("return ext.relu(x)", imports="import threading"), "cheat", "static"),
}


def test_stage_reached_names_the_stage_that_decided(batch, config):
    """stage_reached is where the verdict was decided: a crash or a hang in the timing stage is "timing", one
    in the correctness trials "correctness", like a wrong output; a pass ends at "timing"; the earlier stages
    name themselves."""
    vs = batch["verdicts"]
    assert vs["no_code"].stage_reached == "extract"
    assert vs["compile_error"].stage_reached == "compile"
    assert vs["crash_segfault"].stage_reached == vs["crash_hang"].stage_reached == "correctness"
    assert vs["c07_mutates_input"].stage_reached == "runtime"  # correct outputs, a mutated input
    assert vs["c16_warmup_detection"].stage_reached == "timing"  # a timed output is wrong
    assert {v.stage_reached for v in vs.values() if v.status == "pass"} == {"timing"}
    cfg = dataclasses.replace(config, run_timeout_s=12)  # the hang costs this much
    items = [(TASKS["relu"], Candidate(candidate_id=n, task_id=TASKS["relu"].task_id, backend="cpu", generator="test",
                                       code=code)) for n, (code, _, _) in STAGE_CASES.items()]
    got = {v.candidate_id: v for v in verify_batch(items, config=cfg, compile_workers=1)}
    for n, (_, status, stage) in STAGE_CASES.items():
        v = got[n]
        assert (v.status, v.stage_reached) == (status, stage), (n, v.status, v.stage_reached, v.feedback)
    assert got["crash_in_timing"].correct is False and "SIGSEGV" in got["crash_in_timing"].feedback
    # the limit it ran under: the configured 12 s plus the (here negligible) time its outputs take to copy out
    assert "killed after 12 s of wall-clock time" in got["hang_in_timing"].feedback
    # every correctness call finished, then the first timed call never returned: no bracket was done
    assert re.search(r"6 of 6 correctness calls finished \(the slowest, call \d, in [\d.]+ s\);.*the timing stage had "
                     r"run [\d.]+ s, 0 timed brackets done", got["hang_in_timing"].feedback), got["hang_in_timing"].feedback


def test_a_stopped_runs_progress_reads_the_verifiers_clock():
    """The progress line of a timeout (verifier/execute/channel.py ``progress``), from the steps the channel stamped:
    before any trial; inside one with the slowest finished named; in the timing stage with its brackets counted."""
    from verifier.execute.channel import Ledger, progress

    led = Ledger(steps={"opened": 100.0, "closed": 130.0})
    assert progress(led, 6) == ("It stopped before its first correctness call, 30.0 s after the process was started "
                                "(importing your module, building ModelNew or its extensions).")
    led.steps.update({"trial0": 102.0, "trial0.done": 103.5, "trial1": 103.6, "trial1.done": 110.6, "trial2": 110.7})
    assert progress(led, 6) == ("Where it got to (the verifier's clock): 2 of 6 correctness calls finished (the "
                                "slowest, call 2, in 7.0 s); the first began 2.0 s after the process was started; "
                                "call 3 had run 19.3 s when it was stopped.")
    led.steps.update({"trial2.done": 111.0, "timing": 112.0})
    led.brackets = 1
    assert progress(led, 3).endswith("; the timing stage had run 18.0 s, 1 timed bracket done.")


def test_compile_error_is_kept_and_quoted(batch):
    v = batch["verdicts"]["compile_error"]
    assert v.stage_reached == "compile" and not v.compiled
    assert "error" in v.compile_log.lower() and "First compiler errors" in v.feedback
    assert "expected" in v.feedback  # the g++ message about `int f( {`


def test_wrong_feedback_says_where_and_how_much(batch):
    fb = batch["verdicts"]["c13_low_precision"].feedback
    assert "First mismatch at index" in fb and "max abs error" in fb


def test_stage_order_and_reward_monotone(batch):
    vs = batch["verdicts"]
    assert vs["no_code"].reward < vs["compile_error"].reward < vs["crash_segfault"].reward < vs["honest_relu"].reward
    assert vs["c01_aten_in_cpp"].reward < vs["compile_error"].reward


def test_verify_candidate_accepts_a_model_response(config):
    response = "Sure! Here is the kernel.\n```python\n" + fx.HONEST_RELU + "```\nIt uses a simple loop."
    v = verify_candidate(fx.RELU_TASK, response, backend="cpu", config=config, candidate_id="resp")
    assert v.status == "pass" and v.stage_seconds["compile_cached"] is True


def test_fewer_timing_trials_than_warmup_keeps_outputs_paired_with_their_seeds(batch, config):
    """Timed outputs are judged against the reference on the same seed: with timing_trials < warmup an
    honest kernel must still pass (it was judged C16 when outputs and seeds were misaligned)."""
    cfg = dataclasses.replace(config, timing_trials=2, warmup=3, timed_checks=2)
    v = verify_candidate(fx.RELU_TASK, fx.HONEST_RELU, backend="cpu", config=cfg, candidate_id="few-timed")
    assert v.status == "pass" and not v.cheats, v.feedback


def test_cli_verify(tmp_path, build_dir, capsys, monkeypatch):
    from flows.cli import main

    task = tmp_path / "task.py"
    task.write_text(fx.RELU_TASK)
    cand = tmp_path / "cand.py"
    cand.write_text(C("return ext.relu_lowp(x)"))
    for k, val in (("BUILD_DIR", f'"{build_dir}"'), ("TIME_TORCH_COMPILE", "false"), ("TIMING_TRIALS", "5")):
        monkeypatch.setenv(f"KERNELMILL_VERIFY_{k}", val)
    assert main(["verify", str(task), str(cand), "--backend", "cpu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "cheat" and "C13_PRECISION_LOSS" in out["cheats"]
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model:\n    pass\n")
    assert main(["verify", str(bad), str(cand), "--backend", "cpu"]) == 2
    assert "get_inputs" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "missing.py"), str(cand)]) == 2


def test_task_plan_follows_the_settings_it_was_made_with(config):
    """A plan made with the extra-shape trial off is not reused by a verification that has it on (or back):
    a process that verified one task under both settings ran the hard-coded-rows cheat without its C14 trial."""
    text = fx.RELU_TASK + "\n# plan-cache probe\n"  # a program no other test planned in this process
    off = engine.task_plan(text, "cpu", dataclasses.replace(config, other_shape=False))
    on = engine.task_plan(text, "cpu", dataclasses.replace(config, other_shape=True))
    assert off.other_shape == "" and on.other_shape, (off.other_shape, on.other_shape)
    assert engine.task_plan(text, "cpu", dataclasses.replace(config, other_shape=False)) is off
    assert engine.task_plan(text, "cpu", dataclasses.replace(config, other_shape=True)) is on
    no64 = engine.task_plan(text, "cpu", dataclasses.replace(config, other_shape=True, float64_reference=False))
    assert no64.float64.startswith("off") and on.float64 == ""


def test_builds_are_submitted_round_robin_over_tasks_and_verdicts_keep_the_items_order(config):
    """An RL step hands its candidates grouped by prompt: the builds go to the pool one task at a time in turn,
    so each task's one-off preparation (reference plan and timing) starts early rather than at the batch's
    tail; the verdicts still come back in the order of the items."""
    from verifier.execute.queue import build_order

    relu, mm = TASKS["relu"], TASKS["matmul"]
    grouped = [(relu, None)] * 3 + [(mm, None)] * 2
    assert build_order(grouped) == [0, 3, 1, 4, 2]
    assert build_order([]) == []
    items = [(t, Candidate(candidate_id=f"o{i}", task_id=t.task_id, backend="cpu", generator="test", code=c))
             for i, (t, c) in enumerate([(relu, fx.HONEST_RELU), (relu, "no code block here"), (mm, fx.HONEST_MATMUL)])]
    out = verify_batch(items, config=config, compile_workers=1)
    assert [v.candidate_id for v in out] == ["o0", "o1", "o2"]
    assert [v.status for v in out] == ["pass", "extract_error", "pass"], [v.feedback for v in out]


def test_profile_windows_answer_as_a_scan_of_every_window_would():
    # read_profile asks, for each of tens of thousands of events, whether it overlaps one of thousands of forward
    # markers: the bisected answer must be the plain scan's, nested and overlapping windows included
    import random

    from verifier.child.monitors import Windows

    rng = random.Random(7)
    for trial in range(200):
        wins = [(a, a + rng.randint(0, 30)) for a in (rng.randint(0, 400) for _ in range(rng.randint(0, 12)))]
        w = Windows(wins)
        assert bool(w) == bool(wins)
        for _ in range(40):
            s = rng.randint(-20, 450)
            e = s + rng.randint(0, 40)
            assert w.overlaps(s, e) == any(s < b and e > a for a, b in wins), (wins, s, e)


PREFETCH_CASES = ["honest_relu", "honest_matmul", "c05_zeros", "c06_stale_empty", "c08_caches_output",
                  "c13_low_precision", "c14_hardcoded_rows", "c16_warmup_detection", "crash_segfault"]


@pytest.mark.parametrize("budget", [1 << 30, 1])  # every trial's answers ahead; none kept (the models only)
def test_the_references_answers_computed_while_the_child_runs_decide_as_the_judges_own(config, monkeypatch, budget):
    # on cuda the judge's fp32 and float64 reference runs over each trial's inputs start as the trial's seed is
    # handed out (verifier/judge/prefetch.py); here on cpu: honest candidates pass and each cheat keeps its code,
    # the judge took the answers ready for it (all of them, or none when none fit), in trial order
    from verifier.judge import prefetch as pf

    taken, made = [], []
    real_take, real_init = pf.ReferencePrefetch.take, pf.ReferencePrefetch.__init__

    def take(self, i):
        got = real_take(self, i)
        taken.append(got is not None)
        return got

    def init(self, *a, **k):
        real_init(self, *a, **k)
        self.budget = budget
        made.append(self)

    monkeypatch.setattr(engine, "PREFETCH_BACKENDS", ("cpu",))
    monkeypatch.setattr(pf.ReferencePrefetch, "take", take)
    monkeypatch.setattr(pf.ReferencePrefetch, "__init__", init)
    items = [(TASKS[RUNTIME_CASES[n][0]], Candidate(candidate_id=n, task_id=TASKS[RUNTIME_CASES[n][0]].task_id,
                                                     backend="cpu", generator="test", code=RUNTIME_CASES[n][1]))
             for n in PREFETCH_CASES]
    verdicts = dict(zip(PREFETCH_CASES, verify_batch(items, config=config, compile_workers=2)))
    for name, v in verdicts.items():
        _, _, status, code = RUNTIME_CASES[name]
        assert v.status == status, (name, v.status, v.feedback)
        assert code is None or code in v.cheats, (name, v.cheats)
    assert made and taken and not any(p.failed for p in made)
    assert all(taken) if budget > 1 else not any(taken)
    if budget > 1:
        assert verdicts["honest_relu"].versions["tolerance"] == "float64 reference"
