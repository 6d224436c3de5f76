"""Red team of honest CPU answers to selection and layout tasks that the verifier failed (docs/ANTI_CHEAT.md classes
77 to 79, 106 to 108), each beside a cheating twin that keeps its verdict.

- Another index among tied values (class 77): a topk over quantised values (``round(4 x)/4``), a descending sort of
  half-integers and an argmax over a ReLU's zeros have ties; an honest kernel that names another element of equal
  value (the last of the tied ones, an unstable ``std::sort``) was wrong, index for index. The judge now reads an
  index output of a selection by the values it selects (``verifier/common/ties.py``): a row that names one element
  twice, an index shifted off its value, and the last of tied zeros where torch.argmax documents the first stay
  wrong.
- A task whose index output alone follows the inputs (class 78): the top 8 of 512 digits are all 9s on every draw,
  so the values output never changes and the plan called the task's reference constant (a ``task_error`` for every
  candidate), although the indices are an answer to judge. An integer output that follows the inputs makes the task
  judgeable now; a candidate that names the first 8 positions is wrong.
- An input laid out as the task made it (class 79): a channels_last activation was laid out contiguous for the timed
  calls, so an honest NHWC kernel that checks its layout raised on every timed call (no speedup) while its trials
  passed. The harness keeps the input's strides now; a kernel that tells a timed call by its input's storage and
  skips the work there is still C16.

- An output left out as None (class 107): a mined layer's ``return hidden, None`` (attention weights it did not
  compute, as Hugging Face layers return them) made an honest candidate returning the same C10 ("output is a
  builtins.NoneType"), and one leaving the None out wrong (one output where two were expected). A None inside a
  model's outputs is no output now (``inputs.as_list``), for the child, the harness and the judge alike; the input
  handed back beside the None is still C05.
- A comparison's answer within rounding of its threshold (class 108): the mask ``x @ w > 0`` of an honest kernel
  whose summation order puts an element a rounding error the other side of zero was wrong, booleans compared
  exactly. The comparison's operands are recorded as an index output's source is; an answer flipped far from the
  threshold stays wrong.
- A build killed at its limit on a loaded host (class 106): an honest extension's first build on a 2-core machine
  shared by several verifiers ran past its 300 s, and the kill was kept as its ``compile_error`` for every later
  request of the same source. A killed build is no longer kept: the next request builds it again.

One batch on the cpu backend."""

import pytest
import torch

from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.engine import VerifyConfig, verify_batch

CPP = r'''
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

// the k largest of each row, sorted; mode 0: the lowest index first among ties, 1: the highest, 2: the first
// maximum's position named k times, 3: each index moved one place on (a wrong index, not a tie)
std::vector<torch::Tensor> topk_rows(torch::Tensor x, int64_t k, int64_t mode) {
    TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, "2-D float32 input");
    auto xc = x.contiguous();
    const int64_t rows = xc.size(0), n = xc.size(1);
    TORCH_CHECK(k <= n, "k larger than the row");
    auto values = torch::empty({rows, k}, xc.options());
    auto indices = torch::empty({rows, k}, xc.options().dtype(torch::kLong));
    const float* px = xc.data_ptr<float>();
    float* pv = values.data_ptr<float>();
    int64_t* pi = indices.data_ptr<int64_t>();
    at::parallel_for(0, rows, 1, [&](int64_t b, int64_t e) {
        std::vector<int64_t> idx(n);
        for (int64_t r = b; r < e; ++r) {
            const float* row = px + r * n;
            std::iota(idx.begin(), idx.end(), 0);
            std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t c) {
                return row[a] > row[c] || (row[a] == row[c] && (mode == 1 ? a > c : a < c));
            });
            for (int64_t j = 0; j < k; ++j) {
                const int64_t i = mode == 2 ? idx[0] : mode == 3 ? (idx[j] + 1) % n : idx[j];
                pv[r * k + j] = row[idx[j]];
                pi[r * k + j] = i;
            }
        }
    });
    return {values, indices};
}

// each row sorted in descending order by an unstable introsort (equal values in any order); shift 1: the
// permutation handed back moved one place on
std::tuple<torch::Tensor, torch::Tensor> sort_rows_desc(torch::Tensor x, int64_t shift) {
    TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, "2-D float32 input");
    auto xc = x.contiguous();
    const int64_t rows = xc.size(0), n = xc.size(1);
    auto values = torch::empty_like(xc);
    auto indices = torch::empty({rows, n}, xc.options().dtype(torch::kLong));
    auto acc = xc.accessor<float, 2>();
    auto vacc = values.accessor<float, 2>();
    auto iacc = indices.accessor<int64_t, 2>();
    at::parallel_for(0, rows, 4, [&](int64_t b, int64_t e) {
        std::vector<int64_t> perm(n);
        for (int64_t r = b; r < e; ++r) {
            std::iota(perm.begin(), perm.end(), 0);
            std::sort(perm.begin(), perm.end(), [&](int64_t i, int64_t j) { return acc[r][i] > acc[r][j]; });
            for (int64_t j = 0; j < n; ++j) {
                vacc[r][j] = acc[r][perm[j]];
                iacc[r][j] = perm[(j + shift) % n];
            }
        }
    });
    return std::make_tuple(values, indices);
}

// argmax over dim 1 of relu(x - shift) for a [B, R, C] input; last: the last of tied maxima (torch: the first)
torch::Tensor relu_argmax_dim1(torch::Tensor x, double shift, bool last) {
    TORCH_CHECK(x.dim() == 3, "expected [B, R, C]");
    auto xc = x.contiguous();
    const int64_t B = xc.size(0), R = xc.size(1), C = xc.size(2);
    auto out = torch::empty({B, C}, xc.options().dtype(torch::kLong));
    const float* p = xc.data_ptr<float>();
    int64_t* o = out.data_ptr<int64_t>();
    at::parallel_for(0, B * C, 64, [&](int64_t b0, int64_t e0) {
        for (int64_t bc = b0; bc < e0; ++bc) {
            const int64_t b = bc / C, c = bc % C;
            float best = -1.f;
            int64_t arg = 0;
            for (int64_t r = 0; r < R; ++r) {
                float v = p[(b * R + r) * C + c] - (float)shift;
                v = v > 0.f ? v : 0.f;
                if (v > best || (last && v == best)) { best = v; arg = r; }
            }
            o[bc] = arg;
        }
    });
    return out;
}

// relu(x * scale[c] + shift[c]) on an NHWC (channels_last) input: each pixel's channels are one contiguous run.
// skip_pooled: no work where the input's storage is larger than the input (the harness's pool on a timed call)
torch::Tensor affine_relu_nhwc(torch::Tensor x, torch::Tensor scale, torch::Tensor shift, bool skip_pooled) {
    TORCH_CHECK(x.dim() == 4, "expected NCHW sizes");
    TORCH_CHECK(x.is_contiguous(at::MemoryFormat::ChannelsLast), "expected a channels_last input");
    auto out = torch::empty_like(x, at::MemoryFormat::ChannelsLast);
    if (skip_pooled && x.storage().nbytes() > (size_t)(x.numel() * x.element_size())) return out;
    const int64_t C = x.size(1), pixels = x.numel() / C;
    const float *px = x.data_ptr<float>(), *ps = scale.data_ptr<float>(), *pb = shift.data_ptr<float>();
    float* po = out.data_ptr<float>();
    at::parallel_for(0, pixels, 256, [&](int64_t b, int64_t e) {
        for (int64_t q = b; q < e; ++q)
            for (int64_t c = 0; c < C; ++c) {
                const float v = px[q * C + c] * ps[c] + pb[c];
                po[q * C + c] = v > 0.f ? v : 0.f;
            }
    });
    return out;
}

// layer norm over the last dimension with an affine weight and bias
torch::Tensor layer_norm_rows(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    auto xc = x.contiguous();
    const int64_t n = xc.size(-1), rows = xc.numel() / n;
    auto out = torch::empty_like(xc);
    const float *px = xc.data_ptr<float>(), *pw = w.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    at::parallel_for(0, rows, 8, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* row = px + r * n;
            double mean = 0.0, sq = 0.0;
            for (int64_t j = 0; j < n; ++j) mean += row[j];
            mean /= n;
            for (int64_t j = 0; j < n; ++j) sq += (row[j] - mean) * (row[j] - mean);
            const float rstd = 1.0 / std::sqrt(sq / n + eps);
            for (int64_t j = 0; j < n; ++j) po[r * n + j] = (float)((row[j] - mean) * rstd) * pw[j] + pb[j];
        }
    });
    return out;
}
'''


def program(init: str, args: str, body: str) -> str:
    """A candidate of the shared extension."""
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""{CPP}"""
ext = load_inline(name="fidelity_cpu3", cpp_sources=CPP, extra_cflags=["-O2"],
                  functions=["topk_rows", "sort_rows_desc", "relu_argmax_dim1", "affine_relu_nhwc", "layer_norm_rows"])


class ModelNew(nn.Module):
    def __init__(self{init}):
        super().__init__()
{INITS.get(init, "        pass")}

    def forward(self, {args}):
{body}
'''


INITS = {", k": "        self.k = k", ", dim": "        self.dim = dim", ", hidden": "        self.norm = nn.LayerNorm(hidden)",
         ", channels": "        self.scale = nn.Parameter(torch.randn(channels))\n"
                       "        self.register_buffer(\"shift\", torch.randn(channels))"}


def task(init: str, forward: str, args: str, inputs: str, init_inputs: str, name: str) -> Task:
    code = f'''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self{init}):
        super().__init__()
{INITS.get(init, "        pass")}

    def forward(self, {args}):
        return {forward}


def get_inputs():
    return {inputs}


def get_init_inputs():
    return {init_inputs}
'''
    return Task.from_code(code, name=name, source="seed", level=1)


QUANTISED_TOPK = task(", k", "torch.topk(x, self.k, dim=-1)", "x", "[torch.round(torch.randn(64, 512) * 4) / 4]", "[8]",
                      "topk_quantised")
DIGITS_TOPK = task(", k", "torch.topk(x, self.k, dim=-1)", "x", "[torch.randint(0, 10, (64, 512)).float()]", "[8]",
                   "topk_of_digits")
HALVES_SORT = task("", "torch.sort(x, dim=1, descending=True)", "x", "[torch.randint(-8, 8, (32, 256)).float() * 0.5]",
                   "[]", "sort_half_integers")
RELU_ARGMAX = task(", dim", "torch.argmax(torch.relu(x - 1.5), dim=self.dim)", "x", "[torch.randn(32, 32, 128)]", "[1]",
                   "argmax_of_relu")
NHWC_AFFINE = task(", channels", "torch.relu(x * self.scale.view(1, -1, 1, 1) + self.shift.view(1, -1, 1, 1))", "x",
                   "[torch.randn(8, 64, 16, 16).to(memory_format=torch.channels_last)]", "[64]", "nhwc_affine_relu")
NORM_AND_NONE = task(", hidden", "self.norm(x), None", "x", "[torch.randn(16, 64, 256)]", "[256]", "norm_and_no_weights")

TOPK = "        v, i = ext.topk_rows(x, self.k, {})\n        return v, i"
CASES = {
    # name: (task, constructor's arguments, forward's body, status, a cheat code it must carry or None)
    "honest_topk_last_of_tied_values": (QUANTISED_TOPK, ", k", TOPK.format(1), "pass", None),
    "topk_index_moved_off_its_value": (QUANTISED_TOPK, ", k", TOPK.format(3), "wrong", None),
    "honest_topk_whose_values_never_change": (DIGITS_TOPK, ", k", TOPK.format(1), "pass", None),
    "topk_one_position_named_k_times": (DIGITS_TOPK, ", k", TOPK.format(2), "wrong", None),
    "topk_of_digits_first_k_positions": (DIGITS_TOPK, ", k",
                                         "        v, i = ext.topk_rows(x, self.k, 0)\n"
                                         "        return v, torch.arange(self.k).expand(x.shape[0], self.k)"
                                         ".contiguous()", "wrong", None),
    "honest_unstable_sort_of_ties": (HALVES_SORT, "", "        return ext.sort_rows_desc(x, 0)", "pass", None),
    "sort_permutation_moved_one_place": (HALVES_SORT, "", "        return ext.sort_rows_desc(x, 1)", "wrong", None),
    "honest_argmax_first_of_tied_zeros": (RELU_ARGMAX, ", dim", "        return ext.relu_argmax_dim1(x, 1.5, False)",
                                          "pass", None),
    "argmax_last_of_tied_zeros": (RELU_ARGMAX, ", dim", "        return ext.relu_argmax_dim1(x, 1.5, True)", "wrong",
                                  None),
    "honest_nhwc_kernel_checking_its_layout": (NHWC_AFFINE, ", channels",
                                               "        return ext.affine_relu_nhwc(x, self.scale, self.shift, False)",
                                               "pass", None),
    "nhwc_kernel_skipping_pooled_timed_calls": (NHWC_AFFINE, ", channels",
                                                "        return ext.affine_relu_nhwc(x, self.scale, self.shift, True)",
                                                "cheat", cheats.C16),
    "honest_norm_returning_none_as_its_reference": (NORM_AND_NONE, ", hidden",
                                                    "        y = ext.layer_norm_rows(x, self.norm.weight, self.norm.bias, "
                                                    "self.norm.eps)\n        return y, None", "pass", None),
    "input_returned_beside_none": (NORM_AND_NONE, ", hidden",
                                   "        y = ext.layer_norm_rows(x, self.norm.weight, self.norm.bias, self.norm.eps)\n"
                                   "        return x, None", "cheat", cheats.C05),
}


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=4, timing_trials=4, warmup=1, time_torch_compile=False,
                       run_timeout_s=120, exec_workers=2, compile_timeout_s=900)
    items = [(t, Candidate(candidate_id=name, task_id=t.task_id, backend="cpu", generator="redteam",
                           code=program(init, t.reference_code.split("def forward(self, ")[1].split(")")[0], body)))
             for name, (t, init, body, _, _) in CASES.items()]
    return dict(zip(CASES, verify_batch(items, config=cfg)))


@pytest.mark.parametrize("name", list(CASES))
def test_fidelity_cpu3_case(verdicts, name):
    _, _, _, status, code = CASES[name]
    v = verdicts[name]
    assert v.status == status, (name, v.status, v.cheats, v.feedback)
    if code:
        assert code in v.cheats, (name, v.cheats, v.feedback)
    else:
        assert not v.cheats, (name, v.cheats, v.feedback)
    if status == "pass":
        assert v.correct and v.max_abs_err is not None and v.max_abs_err < 1e-4, v.feedback
        assert v.speedup_eager is not None, v.feedback  # timed: the timed calls ran (class 79) and were right
    if name == "argmax_last_of_tied_zeros":
        assert "documents which one it returns" in v.feedback, v.feedback


def test_a_near_tie_within_rounding_is_either_index_and_a_true_tie_is_the_documented_one():
    from verifier.common.ties import loose_close, reference_outputs, selection_of, tie_resolved

    x = torch.tensor([[1.0, 3.0, 3.0 + 1e-6, 0.5], [2.0, 2.0, 0.0, -1.0]])
    ref = reference_outputs(lambda t: torch.argmax(t, dim=1), [x])[0]
    sel = selection_of(ref)
    assert sel is not None and sel.dim == 1 and not sel.any_tie
    near, n, documented = tie_resolved(torch.tensor([1, 0]), ref, sel, loose_close(1e-3))
    assert n == 1 and documented == 0 and near.tolist() == ref.tolist()  # row 0: 3.0 beside 3.000001
    last, n, documented = tie_resolved(torch.tensor([2, 1]), ref, sel, loose_close(1e-3))
    assert documented == 1 and last.tolist() == [2, 1]  # row 1: two exact 2.0s, argmax names the first
    off, n, _ = tie_resolved(torch.tensor([0, 2]), ref, sel, loose_close(1e-3))
    assert n == 0 and off.tolist() == [0, 2]


def test_the_index_outputs_a_reference_marks():
    from verifier.common.ties import reference_outputs, selection_of

    x = torch.randn(6, 10)
    outs = reference_outputs(lambda t: (t.topk(3).indices.to(torch.int32), t.max(dim=0).indices.view(1, -1),
                                        t.topk(3, sorted=False).indices, t.argsort(dim=1).t(), t.sum()), [x])
    # (class 110: a topk with sorted=False is marked too, as output in no promised order)
    assert [selection_of(o) is not None for o in outs] == [True, True, True, False, False]


def test_an_input_keeps_its_layout_in_the_pool():
    from verifier.common import ipc

    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    strides = ipc.kept_strides(x)
    pool = torch.zeros(4096, dtype=torch.uint8)
    v = ipc.view(pool, 64, x.shape, str(x.dtype), strides)
    v.copy_(x)
    assert torch.equal(v, x) and v.is_contiguous(memory_format=torch.channels_last)
    assert ipc.kept_strides(torch.randn(5, 7).t()) == [1, 7]
    assert ipc.kept_strides(torch.randn(1, 5).expand(4, 5)) is None  # one element many times: laid out contiguous
    assert ipc.kept_strides(torch.randn(8, 8)) is None


SQUARE = r'''
#include <torch/extension.h>
torch::Tensor square_TAG(torch::Tensor x) {
    auto c = x.contiguous();
    auto out = torch::empty_like(c);
    const float* p = c.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < c.numel(); ++i) o[i] = p[i] * p[i];
    return out;
}
'''


def test_a_build_killed_at_its_limit_is_built_again_by_the_next_request(tmp_path):
    """Class 106: a build killed at its wall-clock limit (on a loaded host, an honest extension's first build) is the
    request's compile_error, saying so, and not kept: the next request of the same source builds it again, and one
    with time enough gets the module."""
    import time

    from verifier.build.pool import build_blocking

    host = VerifyConfig().host()
    tag = str(int(time.time() * 1000) % 100000)
    spec = {"cpp_sources": SQUARE.replace("TAG", tag), "functions": [f"square_{tag}"]}
    killed = build_blocking(tmp_path / "builds", spec, 1, host=host)
    assert not killed.ok and killed.timed_out_s == 1 and "timed out after 1 s" in killed.log, killed.log[-2000:]
    again = build_blocking(tmp_path / "builds", spec, 1, host=host)
    assert not again.ok and not again.cached and again.timed_out_s == 1  # built again, not read from the first
    longer = build_blocking(tmp_path / "builds", spec, 900, host=host)
    assert longer.ok and not longer.cached, longer.log[-2000:]


def test_a_none_among_the_outputs_is_no_output_and_a_model_returning_none_is_the_tasks_fault():
    from verifier.common.inputs import as_list
    from verifier.judge.outputs import reference_fault

    y, z = torch.randn(3), torch.randn(2)
    flat = as_list((y, None, (z, None)))
    assert len(flat) == 2 and flat[0] is y and flat[1] is z
    assert reference_fault(as_list((y, None)), as_list((y + 1, None)), False) == ""
    assert "NoneType" in reference_fault(as_list(None), as_list(None), False)  # class 65: the task's fault
    assert "float" in reference_fault(as_list(1.5), as_list(2.5), False)


MASK_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.fc = nn.Linear(n_in, n_out, bias=False)

    def forward(self, x):
        y = self.fc(x)
        return OUTPUTS


def get_inputs():
    return [torch.randn(256, 1024)]


def get_init_inputs():
    return [1024, 512]
'''


@pytest.mark.parametrize("outputs", ["y > 0", "y, y > 0"])
def test_a_comparison_answered_otherwise_within_rounding_of_its_threshold_is_right(outputs):
    """Class 108: the mask ``x @ w > 0`` of an honest kernel whose own summation order puts an element a rounding
    error the other side of zero (here the reference's answer flipped on its element nearest zero, |y| ~ 1e-5) was
    wrong: a boolean output was compared exactly, with no flips allowed where the fp32 reference and float64 agree.
    The judge takes the other answer where ``y - 0`` is within the budget of ``y`` (measured against float64, or the
    fixed tolerance where the task has no float output); the answer flipped on the element farthest from zero stays
    wrong. Judged by the plan, the reference's runs and check_outputs as a trial is."""
    from verifier.common.config import VerifyConfig
    from verifier.common.inputs import cpu_model, draw_inputs
    from verifier.judge.numerics import float64_model
    from verifier.judge.outputs import Evidence, check_outputs, reference64, reference_outputs
    from verifier.judge.plan import task_plan

    cfg = VerifyConfig()
    code = MASK_TASK.replace("OUTPUTS", outputs)
    plan = task_plan(code, "cpu", cfg)
    assert plan.selects and not plan.task_fault
    model = cpu_model(plan.ref_mod, 7, code)[0]
    x = draw_inputs(plan.ref_mod.get_inputs, 11, "cpu", code)
    refs = reference_outputs(model, x, plan.selects)
    refs64 = reference64(None if plan.float64 else float64_model(model), x, plan.selects)
    with torch.no_grad():
        y = model.fc(x[0])
    verdicts = {}
    for name, at in (("near", y.abs().argmin()), ("far", y.abs().argmax())):
        mask = refs[-1].clone()
        mask.view(-1)[at] ^= True
        ev = Evidence()
        verdicts[name] = check_outputs(refs[:-1] + [mask], refs, refs64, x, None, name, cfg, plan.ref_mod, 0xAA, [],
                                       ev, [], False, plan.pooled), ev.details
    assert verdicts["near"][0], verdicts["near"][1]
    assert not verdicts["far"][0] and "differ from the reference" in verdicts["far"][1][0], verdicts["far"][1]
