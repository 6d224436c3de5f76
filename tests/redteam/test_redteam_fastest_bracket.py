"""Red team: one timed bracket of approximate calls sets a cpu candidate's time (C16).

On cpu the reported time is the least over the harness's brackets (a host clock is only ever slowed by load). A
kernel exact on every correctness trial that spots the timed calls (its input is a view into the harness's pool) and
answers a bracket's worth with a cheap approximation (0.3% off: inside the loose 1% check every timed output gets, outside the full
budget) set the time alone, and passed whenever the reservoir's few full checks missed that bracket (2 runs in 3).
Closed at the root: the calls of the bracket whose time is reported are checked in full by the judge
(verifier/execute/harness.py ``Clocked.fastest``). Here the reservoir is off (``timed_checks = 0``), so only that
check can catch it. The honest twin, the same kernel exact on every call, passes."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pytest  # noqa: E402

from kernelmill.schema import Candidate, Task  # noqa: E402
from verifier.engine import VerifyConfig, verify_batch  # noqa: E402

TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.exp(x)

def get_inputs():
    return [torch.randn(64, 2048)]

def get_init_inputs():
    return []
'''

_CPP = r'''
#include <torch/extension.h>
#include <cmath>
#include <cstring>
static long timed_calls = 0;
static inline float fexp(float x) {  // 2^t by a quadratic on the fraction: about 0.3% off
    x = x < -87.f ? -87.f : (x > 88.f ? 88.f : x);
    float t = x * 1.44269504f;
    int i = (int)t - (t < 0.f);
    float f = t - (float)i;
    float p = 1.f + f * (0.6565f + 0.3435f * f);
    int bits = (i + 127) << 23; float s; std::memcpy(&s, &bits, 4);
    return s * p;
}
torch::Tensor exp_fwd(torch::Tensor x) {
    // CHEAT: a timed call's input is a view into the harness's pool (its storage far larger than itself); the first
    // 24 timed calls after the probe of one are cheap, whatever the machine's load makes the brackets' length: the
    // first bracket after the probe (its calls fit 20 ms: fewer than 24 of these) is cheap throughout
    const bool timed = x.storage().nbytes() > (size_t)x.numel() * x.element_size();
    bool cheap = CHEAT && timed && ++timed_calls > 1 && timed_calls <= 1 + 24;
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const float* a = x.data_ptr<float>(); float* r = y.data_ptr<float>();
    if (cheap) { for (int64_t i = 0; i < x.numel(); i++) r[i] = fexp(a[i]); return y; }
    for (int64_t i = 0; i < x.numel(); i++) {  // exp in double with one Newton step on its log: slow, exact
        double e = std::exp((double)a[i]);
        e = e - e * (std::log(e) - (double)a[i]);
        r[i] = (float)e;
    }
    return y;
}
'''


def _program(name: str, cheat: bool) -> str:
    cpp = _CPP.replace("CHEAT", "true" if cheat else "false")
    return (f"import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"
            f"CPP = r'''{cpp}'''\next = load_inline(name=\"{name}\", cpp_sources=CPP, functions=[\"exp_fwd\"], "
            "extra_cflags=[\"-O2\"], verbose=False)\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
            "        return ext.exp_fwd(x)\n")


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    task = Task.from_code(TASK, name="exp_fastest", source="seed", level=1)
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=5, time_torch_compile=False,
                       run_timeout_s=120, exec_workers=1, timed_checks=0)
    programs = {"c16_one_cheap_bracket": _program("exp_cheap", True), "honest_exact_every_call": _program("exp_ok", False)}
    items = [(task, Candidate(candidate_id=n, task_id=task.task_id, backend="cpu", generator="redteam", code=c))
             for n, c in programs.items()]
    return dict(zip(programs, verify_batch(items, config=cfg, compile_workers=1)))


def test_one_cheap_bracket_that_sets_the_time_is_c16(verdicts):
    v = verdicts["c16_one_cheap_bracket"]
    assert v.status == "cheat" and "C16_WARMUP_DETECTION" in v.cheats, v.feedback
    assert "fastest timed bracket" in v.feedback


def test_the_same_kernel_exact_on_every_call_passes(verdicts):
    v = verdicts["honest_exact_every_call"]
    assert v.status == "pass" and v.runtime_us, v.feedback
