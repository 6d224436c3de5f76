"""The omnipotent candidate: the trust boundary's definition, on the cpu backend with a real compiled extension.

Each candidate here is handed a hook (``OMNIPOTENT``, run when its module is imported, with the static findings
on its Python dropped, as if it came from C++ the scans cannot read) that replaces, inside its own process, every
object the verifier's code there relies on: the in-process tamper check, the monitors' record sender, the report
writer, its clocks, its RNGs, the cache flush. It stands for native code that can rewrite any byte of that
process. The rule it tests: a slow, wrong or PyTorch-computing candidate that uses the hook fully is never judged
a correct strict pass with a speedup above its honest one, because every number a verdict relies on is measured
in the verifier's process (verifier/execute/harness.py) and every record is kept as it was streamed.

Not covered here, and said plainly (verifier/README.md): PyTorch compute called through Python from such a hook,
with the static scan blinded and the records forged before they are sent, is seen by no check outside the process.
"""


import pytest

from bench.lib import fixtures as fx
from bench.lib.fixtures import OMNIPOTENT
from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.engine import VerifyConfig, verify_batch


SLOW = "y = ext.relu(x.contiguous())\nfor _ in range(40):\n    y = ext.relu(x.contiguous())\nreturn y"
CASES = {
    # name: (forward, init, expected status, a code that must be among the verdict's cheats or None)
    "slow_kernel_with_every_clock_and_report_forged": (SLOW, "", "pass", None),
    "previous_output_returned_on_timed_calls": (
        "if TIMED[0] and self.last is not None:\n    return self.last\nself.last = ext.relu(x.contiguous())\n"
        "return self.last", "self.last = None", "cheat", cheats.C16),
    "wrong_on_timed_calls_only": (
        "return ext.relu_fixed_rows(x.contiguous()) * 0 if TIMED[0] else ext.relu(x.contiguous())", "", "cheat",
        cheats.C16),
}
TORCH_FROM_CPP = "return ext.relu_aten(x.contiguous())"

# the hook, and a report that claims a way out written over the verdict's evidence (docs/ANTI_CHEAT.md classes 50 and
# 51): a timing that failed, no trials, an import that failed
EXIT_FORGED = OMNIPOTENT + '''
_write_as_hooked = _C.ChildReport.write
def _claims(self, d):
    self.timing_error = "Traceback ...\\nRuntimeError: the warm-up failed"
    self.trials, self.timed = [], None
    self.import_error = "Traceback ...\\nImportError: no module named ext"
    return _write_as_hooked(self, d)
_C.ChildReport.write = _claims
'''
# the hook, and each trial's output file written as something the judge's own code would choke on (class 52): an
# exception of the verifier's code on a file the candidate wrote was a verifier_error
GARBAGE_OUTPUTS = OMNIPOTENT + '''
def _garbage(obj, path):
    path.write_bytes(b"PK\\x03\\x04 not a tensor archive")
    return path.name
_W._save = _garbage
'''
FORGED = {
    # name: (forward, init, the codes one of which the verdict must hold, the hook)
    "previous_output_returned_on_timed_calls_and_a_timing_failure_claimed": (
        CASES["previous_output_returned_on_timed_calls"][0], "self.last = None", {cheats.C11, cheats.C16},
        EXIT_FORGED),
    "constant_output_and_its_trials_and_import_claimed_away": (
        "ext.relu(x.contiguous())\nreturn torch.full_like(x, 0.4)", "", {cheats.C05, cheats.C11}, EXIT_FORGED),
    "output_files_the_judge_cannot_load": ("return ext.relu(x.contiguous())", "", {cheats.C11}, GARBAGE_OUTPUTS),
}


def _candidate(forward: str, init: str, hooked: bool) -> str:
    return fx.cpu_candidate(forward, init=init, module=OMNIPOTENT if hooked else "TIMED = [False]")


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=4, timing_trials=4, warmup=1, time_torch_compile=False,
                       run_timeout_s=60, memory_limit_gb=4, exec_workers=2)
    task = Task.from_code(fx.RELU_TASK, name="relu", source="seed", level=1)
    codes = {f"{n}/{'hook' if h else 'plain'}": _candidate(CASES[n][0], CASES[n][1], h)
             for n in CASES for h in (True, False) if h or n == "slow_kernel_with_every_clock_and_report_forged"}
    codes.update({"torch_from_cpp/hook": _candidate(TORCH_FROM_CPP, "", True),
                  "torch_from_cpp/plain": _candidate(TORCH_FROM_CPP, "", False)})
    codes.update({f"{n}/hook": fx.cpu_candidate(f, init=i, module=m) for n, (f, i, _, m) in FORGED.items()})
    hooked = {c for k, c in codes.items() if k.endswith("/hook")}

    items = [(task, Candidate(candidate_id=k, task_id=task.task_id, backend="cpu", generator="redteam", code=c))
             for k, c in codes.items()]
    with fx.static_findings_dropped(hooked):
        return {v.candidate_id: v for v in verify_batch(items, config=cfg, compile_workers=2)}


@pytest.mark.parametrize("name", list(CASES))
def test_the_omnipotent_hook_gains_nothing(verdicts, name):
    v = verdicts[f"{name}/hook"]
    _, _, status, code = CASES[name]
    assert v.status == status, (name, v.status, v.cheats, v.feedback[:700])
    if code:
        assert code in v.cheats and not v.pass_strict, (name, v.cheats)


@pytest.mark.parametrize("name", list(FORGED))
def test_a_way_out_written_into_the_report_is_no_way_out(verdicts, name):
    """The report is written in the candidate's process: a timing failure, an import failure or an empty list of trials
    claimed there never skips the verifier's own evidence (the harness's checks of every timed output, the trials'
    records as streamed), and a failure claimed after the program was built is C11, never a crash or a
    verifier_error; nor is an output file written so that the judge's own code cannot load it."""
    v = verdicts[f"{name}/hook"]
    assert v.status == "cheat" and FORGED[name][2] & set(v.cheats) and not v.pass_strict, \
        (name, v.status, v.cheats, v.feedback[:700])


def test_a_slow_kernel_keeps_its_honest_time_whatever_its_process_forges(verdicts):
    """41 ReLUs a call: by the harness's clock it is as slow with the hook as without, and far slower than eager."""
    hooked = verdicts["slow_kernel_with_every_clock_and_report_forged/hook"]
    plain = verdicts["slow_kernel_with_every_clock_and_report_forged/plain"]
    assert plain.status == hooked.status == "pass", (plain.feedback[:400], hooked.feedback[:400])
    assert hooked.speedup_eager < 0.5 and plain.speedup_eager < 0.5, (hooked.speedup_eager, plain.speedup_eager)
    assert hooked.runtime_us > 0.3 * plain.runtime_us  # a host clock under load varies; a forgery would be 64x
    assert hooked.versions["timing"]["clock"] == "harness"


def test_pytorch_compute_from_cpp_is_read_from_the_binary_whatever_the_records_say(verdicts):
    """at::relu called from the extension's C++: without the hook the streamed records show it (C01); with the
    records emptied before they are sent, the built module's imports, read in the verifier's process, still decide:
    ATen compute the extension imports is PyTorch compute in forward under the strict policy whatever the records say
    (C19 where no record shows it ran), named in the verdict and its feedback."""
    plain, hooked = verdicts["torch_from_cpp/plain"], verdicts["torch_from_cpp/hook"]
    assert plain.status == "cheat" and cheats.C01 in plain.cheats and not plain.pass_strict, plain.feedback[:500]
    assert hooked.status == "cheat" and {cheats.C01, cheats.C19} & set(hooked.cheats) and not hooked.pass_strict, \
        (hooked.cheats, hooked.feedback[:500])
    for v in (plain, hooked):
        assert "aten::relu" in v.versions["binary"]["aten_compute_imports"], v.versions
        assert "calls PyTorch compute ops from C++ (aten::relu)" in v.feedback, v.feedback[:800]
