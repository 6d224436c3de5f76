"""The omnipotent candidate on cuda (tests/redteam/test_redteam_omnipotent.py has the cpu class and says what the
hook is): a slow kernel and a kernel that returns its previous output on timed calls, each with every object of the
verifier's code in its process replaced, gain nothing: times and timed outputs are read by the harness."""

import tempfile

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.engine import VerifyConfig, verify_batch

pytestmark = pytest.mark.gpu

OMNI = fx.OMNIPOTENT
SLOW = "y = self.ext.relu_cuda(x.contiguous())\n        for _ in range(20):\n            y = self.ext.relu_cuda(x)\n        return y"
STALE = ("if TIMED[0] and self.last is not None:\n            return self.last\n"
         "        self.last = self.ext.relu_cuda(x.contiguous())\n        return self.last")
CASES = {"slow/hook": (SLOW, True), "slow/plain": (SLOW, False), "stale/hook": (STALE, True)}


def _code(forward: str, hooked: bool) -> str:
    code = fx.cuda_relu_candidate(3, forward=forward)
    code = code.replace("class ModelNew", (OMNI if hooked else "TIMED = [False]") + "\n\nclass ModelNew")
    return code.replace("self.ext = load_inline", "self.last = None\n        self.ext = load_inline")


@pytest.fixture(scope="module")
def verdicts():
    cfg = VerifyConfig(build_dir=tempfile.mkdtemp(prefix="km-omni-gpu-"), trials=3, timing_trials=5,
                       time_torch_compile=False, run_timeout_s=120, exec_workers=3)
    task = Task.from_code(fx.CUDA_RELU_TASK, name="relu", source="seed", level=1)
    codes = {n: _code(*CASES[n]) for n in CASES}
    hooked = {codes[n] for n in CASES if CASES[n][1]}

    items = [(task, Candidate(candidate_id=n, task_id=task.task_id, backend="cuda", generator="redteam", code=c))
             for n, c in codes.items()]
    with fx.static_findings_dropped(hooked):
        return {v.candidate_id: v for v in verify_batch(items, config=cfg, compile_workers=4)}


def test_a_slow_kernel_with_everything_forged_keeps_its_time(verdicts):
    hooked, plain = verdicts["slow/hook"], verdicts["slow/plain"]
    assert hooked.status == plain.status == "pass", (hooked.feedback[:600], plain.feedback[:600])
    # the forged clocks and reports gain nothing: the hooked twin is no faster than the plain one, and stays slow (21
    # launches of the relu where eager runs one; the last 20 read x from L2, so about 0.2x of eager, never near 1x).
    # Slower is no gain, and no bound: these 21 launches a call are the host's work, and the hook's replaced objects
    # cost the host more (an H100 shared by six test workers at cc46f2f: hooked 2385 us, plain 985 us a call)
    assert hooked.runtime_us > 0.8 * plain.runtime_us, (hooked.runtime_us, plain.runtime_us, hooked.versions.get("timing"))
    assert hooked.speedup_eager < 0.5 and hooked.speedup_eager < 1.25 * plain.speedup_eager, (
        hooked.speedup_eager, plain.speedup_eager)
    # the hook also says its forward waits on the host (it does not): its first bracket in time took the hint back
    t = hooked.versions["timing"]
    assert t["host_waits"] and t["host_waits_taken_back"] and not plain.versions["timing"]["host_waits"], (
        t, plain.versions["timing"])


def test_returning_the_previous_output_on_timed_calls_is_seen(verdicts):
    v = verdicts["stale/hook"]
    assert v.status == "cheat" and cheats.C16 in v.cheats, (v.status, v.cheats, v.feedback[:600])
