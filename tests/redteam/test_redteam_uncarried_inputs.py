"""Red team of inputs that are not one tensor (docs/ANTI_CHEAT.md class 42).

A task whose ``get_inputs`` hands forward a value JSON does not carry as it is (``torch.sum(x, dim=dims)`` with
``dims = (1, 2)``, a list of tensors, a dtype, a NaN) used to have that value drawn by the candidate's own process
in the timed calls, and the harness then checked none of their outputs (it did not know the inputs they answered).
A candidate that told a timed call from a trial (its input is a view into the harness's pool, whose storage is far
larger than the tensor) returned an unwritten tensor on every timed call and earned a 1.5x speedup.

Closed at the root: every input of every call is the harness's. Such a value travels as a tree (tagged JSON, its
tensors placed in the pool like the top-level ones: verifier/common/ipc.py ``encode_value``), so every timed output
is checked again. A value of a kind no tree carries (an object of the task's own class) is still drawn by the child,
and then the speedup is reported but earns no reward (``Clocked.unchecked``). Honest twin: the same kernel computing
every call passes, timed.
"""

import math

import pytest
import torch

from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.common import ipc
from verifier.engine import VerifyConfig, verify_batch
from verifier.execute.harness import Harness

TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """Sums x over the dimensions given with each call."""

    def __init__(self):
        super().__init__()

    def forward(self, x, dims):
        return torch.sum(x, dim=dims)


batch_size = 16
dim1 = 32
dim2 = 64


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2), (1, 2)]


def get_init_inputs():
    return []
'''

KERNEL = r'''
#include <torch/extension.h>
torch::Tensor sum12(torch::Tensor x) {
    auto out = torch::empty({x.size(0)}, x.options());
    SKIP
    auto xc = x.contiguous();
    const float* p = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t B = xc.size(0), R = xc.size(1) * xc.size(2);
    for (int64_t b = 0; b < B; ++b) {
        double acc = 0.0;
        for (int64_t r = 0; r < R; ++r) acc += p[b * R + r];
        o[b] = (float)acc;
    }
    return out;
}
'''
# a timed call's input is a view into the harness's shared pool: its storage is far larger than itself
SKIP = "if (x.storage().nbytes() > (size_t)x.numel() * x.element_size()) return out;"


def _candidate(name: str, skip: bool) -> str:
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""{KERNEL.replace("SKIP", SKIP if skip else "")}"""
ext = load_inline(name="{name}", cpp_sources=CPP, functions=["sum12"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def forward(self, x, dims):
        return ext.sum12(x)
'''


CASES = {"c16_timed_calls_skipped_behind_a_tuple_input": (_candidate("sum12_skip", True), "cheat"),
         "honest_sum_over_a_tuple_of_dims": (_candidate("sum12_ok", False), "pass")}


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=3, timing_trials=3, warmup=1, time_torch_compile=False,
                       run_timeout_s=120, memory_limit_gb=4, exec_workers=1)
    task = Task.from_code(TASK, name="sumdims", source="seed", level=1)
    items = [(task, Candidate(candidate_id=n, task_id=task.task_id, backend="cpu", generator="redteam", code=c))
             for n, (c, _) in CASES.items()]
    return dict(zip(CASES, verify_batch(items, config=cfg, compile_workers=1)))


@pytest.mark.parametrize("name", list(CASES))
def test_timed_calls_get_the_harness_inputs_whatever_their_kind(verdicts, name):
    v, want = verdicts[name], CASES[name][1]
    assert v.status == want, (name, v.status, v.cheats, v.feedback[:800])
    if want == "cheat":
        assert cheats.C16 in v.cheats, v.cheats
    else:
        assert v.cheats == [] and v.speedup_eager is not None and v.runtime_us, (v.speedup_eager, v.feedback[:600])
        assert "cannot be handed to your process" not in v.feedback


def test_values_travel_as_trees_with_their_tensors_in_the_pool():
    pool = torch.zeros(4096, dtype=torch.uint8)
    offs = []

    def place(t):
        offs.append(256 * len(offs))
        return [offs[-1], list(t.shape), str(t.dtype)]

    value = [(1, 2), [torch.arange(3.0), torch.ones(2, 2)], torch.float16, float("nan"), -math.inf,
             torch.Size([4, 5]), {"k": (torch.full((2,), 7.0), None, True)}, "mean", torch.device("cpu")]
    tree = ipc.encode_value(value, place)
    import json
    tree = json.loads(json.dumps(tree, allow_nan=False))  # what the channel carries: strict JSON
    for t, at in zip(ipc.value_tensors(value), offs):
        ipc.view(pool, at, list(t.shape), str(t.dtype)).copy_(t)
    got = ipc.decode_value(tree, lambda at: ipc.view(pool, at[0], at[1], at[2]))
    assert got[0] == (1, 2) and isinstance(got[0], tuple)
    assert torch.equal(got[1][0], torch.arange(3.0)) and torch.equal(got[1][1], torch.ones(2, 2))
    assert got[2] is torch.float16 and math.isnan(got[3]) and got[4] == -math.inf
    assert got[5] == torch.Size([4, 5]) and isinstance(got[5], torch.Size)
    assert torch.equal(got[6]["k"][0], torch.full((2,), 7.0)) and got[6]["k"][1:] == (None, True)
    assert got[7] == "mean" and got[8] == torch.device("cpu")
    with pytest.raises(ipc.Uncarried):
        ipc.encode_value([object()], place)


class _Opaque:
    pass


def test_an_input_no_tree_carries_turns_the_speedup_unrewarded(tmp_path):
    """The one input kind left to the child: its timed outputs are unchecked, and the harness says so."""
    model = lambda x, o: x * 2  # noqa: E731
    h = Harness("cpu", tmp_path, lambda: model, lambda seed: [torch.randn(8), _Opaque()], check=True)
    h._set_up()
    assert [e[0] for e in h._layout["inputs"]] == ["t", "child"]
    assert h.check is False and h.result.unchecked is True
    h2 = Harness("cpu", tmp_path, lambda: (lambda x, d: x.sum(dim=d)), lambda seed: [torch.randn(2, 3, 4), (1, 2)],
                 check=True)
    h2._set_up()
    assert [e[0] for e in h2._layout["inputs"]] == ["t", "p"] and h2.check is True and not h2.result.unchecked
