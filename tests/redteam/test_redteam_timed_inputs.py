"""Red team of inputs written in place on the timed calls only (docs/ANTI_CHEAT.md class 43, row 7).

Input mutation was judged from the execution child's own record alone: after each correctness trial the child
compared the inputs with untouched copies, in the candidate's process. The timed calls were never compared at all,
and a candidate whose native code empties its records would hide the trials' too. A kernel that told a timed call
from a trial (its input is a view into the harness's pool, whose storage is far larger than the tensor) wrote its
answer into its input and returned the input: every checked output right, every trial clean, a pass.

Closed outside the candidate's process: the harness wrote every timed input into its pool, so once a bracket's
calls are done it compares the pool's inputs with what it wrote (value by value, NaN equal to NaN; verifier/execute/harness.py
``inputs_changed``), and a change is C07 (verifier/judge/checks.py ``check_timed_inputs``), whatever the child's
monitors say. Honest twin: the same kernel writing a new tensor on every call passes, timed.
"""

import pytest
import torch

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.engine import VerifyConfig, verify_batch
from verifier.execute.timed_checks import inputs_changed as _inputs_changed

KERNEL = r'''
#include <torch/extension.h>
torch::Tensor relu(torch::Tensor x) {
    // a timed call's input is a view into the harness's shared pool: its storage is far larger than itself
    const bool timed = x.storage().nbytes() > (size_t)x.numel() * x.element_size();
    auto out = IN_PLACE ? x : torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = in[i] > 0.f ? in[i] : 0.f;
    return out;
}
'''


def _candidate(name: str, in_place: str) -> str:
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""{KERNEL.replace("IN_PLACE", in_place)}"""
ext = load_inline(name="{name}", cpp_sources=CPP, functions=["relu"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x.contiguous())
'''


CASES = {"c07_input_written_in_place_when_timed": (_candidate("relu_inplace_timed", "timed"), "cheat"),
         "honest_relu_into_a_new_tensor": (_candidate("relu_new_tensor", "false"), "pass")}


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=3, timing_trials=3, warmup=1, time_torch_compile=False,
                       run_timeout_s=120, memory_limit_gb=4, exec_workers=1)
    task = Task.from_code(fx.RELU_TASK, name="relu", source="seed", level=1)
    items = [(task, Candidate(candidate_id=n, task_id=task.task_id, backend="cpu", generator="redteam", code=c))
             for n, (c, _) in CASES.items()]
    return dict(zip(CASES, verify_batch(items, config=cfg, compile_workers=1)))


@pytest.mark.parametrize("name", list(CASES))
def test_inputs_written_in_place_on_timed_calls_are_seen_outside_the_process(verdicts, name):
    v, want = verdicts[name], CASES[name][1]
    assert v.status == want, (name, v.status, v.cheats, v.feedback[:800])
    if want == "cheat":
        assert v.cheats == [cheats.C07], v.cheats
        assert "Timed runs: forward modified its inputs in place" in v.feedback, v.feedback[:800]
    else:
        assert v.cheats == [] and v.speedup_eager is not None and v.runtime_us, (v.speedup_eager, v.feedback[:600])


def test_the_comparison_is_by_value_with_nan_equal_to_nan_and_covers_tree_inputs():
    nan_row = torch.tensor([0.0, float("nan"), -2.0])
    private = [[nan_row.clone(), (torch.arange(4), 7)], [nan_row.clone(), (torch.arange(4), 7)]]
    pool = [[nan_row.clone(), [torch.arange(4)]], [nan_row.clone(), [torch.arange(4)]]]
    views = [(ins, []) for ins in pool]

    def changed():
        return [(k, j) for k, j, f in _inputs_changed(private, views) if bool(f)]

    assert changed() == []  # NaN where a NaN was written is no change
    pool[0][0][0] = -0.0
    assert changed() == []  # nor is -0.0 over 0.0: equal values, as the child's own monitor (torch.equal) compares
    pool[1][0][2] = 5.0  # the second call's first input written over
    pool[0][1][0][3] = -1  # the first call's tree input: its tensor leaf
    assert changed() == [(0, 1), (1, 0)]
