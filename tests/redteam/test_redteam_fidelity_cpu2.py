"""Red team of honest CPU answers written as frontier models write them that the verifier failed (docs/ANTI_CHEAT.md
classes 71 to 76), each beside a cheating twin that keeps its code.

- A list of tensors as one input (class 71): a task whose get_inputs hands forward ``[x, 0.75, [a, b]]`` (mined
  modules take lists of feature maps) was a ``verifier_error``, "the task program does not run": the plan's check
  that two draws of one seed agree compared the list with ``==``, which asks a tensor for its truth value. The
  comparison now reads into the lists, tuples and dicts an input holds (``inputs.same``); a kernel that writes
  into a tensor of the list is still C07.
- ``torch.broadcast_tensors`` before the kernel (class 72): every input expanded to the common shape, views only,
  was C01 by the static scan and by the runtime monitor (the profiler records ``aten::broadcast_tensors`` around
  the expands). It is on both allowlists now, as ``broadcast_to`` was; ``torch.maximum`` beside it is C01.
- ATen's elementwise loop over the candidate's own functor (class 75): ``at::native::cpu_kernel_vec(iter, op, vop)``
  of ATen/native/cpu/Loops.h, a header the source scan counts as a building block, was C01 all the same: every
  ``at::native`` spelling was ATen internals, and the binary scan refused TensorIterator's vtable. A qualified call
  of the loops (``vendor.ELEMENTWISE_LOOPS``) passes now, and the vtable with the iterator's members; ATen's own
  maximum (``at::native::max``) beside them stays C01.
- A result handed back as a Python float (class 76): a loss kernel returning ``double``, made the output by
  ``torch.tensor(loss)``, its int64 targets converted to int32 for it (a copy: ``ops.MOVES_DATA``), was C02: the
  data-movement knockout (class 66) kept the own calls' Python numbers, so the output stayed right with the call
  knocked out. Integers and booleans (sizes, flags) are kept, a float is knocked out now; PyTorch's copies as the
  answer beside a float nobody uses stay C02.
- Function forms of allowed views and copies (class 74): ``torch.clone(x)``, ``torch.select``, ``torch.detach`` (the
  methods were allowed) and a complex output made a view of the kernel's (real, imaginary) pairs by
  ``torch.view_as_complex`` (or taken apart by ``view_as_real``, ``torch.real`` / ``imag``, ``torch.meshgrid``'s
  views) were C01 for the static scan, and the complex views for the runtime monitor. Both lists have them now;
  a multiplication beside the view stays C01.
- Broadcasting in the C++ (class 73): ``at::expand_outplace`` / ``at::infer_size`` (ATen/ExpandUtils.h) and
  ``at::toAccumulateType`` compute a shape or a dtype from sizes, yet the binary scan called the extension's import
  of them from libtorch_cpu C01 ("code no monitor sees"). They are on the binary's allowlist now; an operator called
  below the dispatcher (``at::cpu::maximum``) is still C01.

One batch on the cpu backend."""

import pytest

from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.engine import VerifyConfig, verify_batch

CPP = r'''
#include <torch/extension.h>
#include <ATen/AccumulateType.h>
#include <ATen/ExpandUtils.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/cpu/Loops.h>
#include <ATen/cpu/vec/vec.h>
#include <algorithm>
#include <cmath>
#include <vector>

// clamp(x * scale, -1, 1) + ts[0] * ts[1]; write 1: the answer also written into ts[0] (the caller's tensor)
torch::Tensor scale_clamp_fma(torch::Tensor x, double scale, std::vector<torch::Tensor> ts, int64_t write) {
    TORCH_CHECK(ts.size() == 2, "expected two tensors");
    auto a = ts[0].contiguous(), b = ts[1].contiguous();
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const float *px = x.data_ptr<float>(), *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i)
        po[i] = std::min(1.f, std::max(-1.f, px[i] * (float)scale)) + pa[i] * pb[i];
    if (write) std::copy(po, po + x.numel(), ts[0].data_ptr<float>());
    return out;
}

// max(a, b) * sigmoid(a - b) of two tensors of one shape (broadcast by the caller)
torch::Tensor max_sig(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.sizes() == b.sizes(), "inputs must be broadcast first, got ", a.sizes(), " and ", b.sizes());
    a = a.contiguous(); b = b.contiguous();
    auto out = torch::empty_like(a);
    const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) po[i] = std::max(pa[i], pb[i]) / (1.f + std::exp(pb[i] - pa[i]));
    return out;
}

// m * sigmoid(a - b), m handed in
torch::Tensor mul_sig(torch::Tensor m, torch::Tensor a, torch::Tensor b) {
    m = m.contiguous(); a = a.contiguous(); b = b.contiguous();
    auto out = torch::empty_like(m);
    const float *pm = m.data_ptr<float>(), *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < m.numel(); ++i) po[i] = pm[i] / (1.f + std::exp(pb[i] - pa[i]));
    return out;
}

// the DFT of each row as (re, im) pairs [rows, n, 2], for torch.view_as_complex
torch::Tensor dft_pairs(torch::Tensor x) {
    x = x.contiguous();
    const int64_t rows = x.size(0), n = x.size(1);
    auto out = torch::empty({rows, n, 2}, x.options());
    const float* in = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const double two_pi = 6.283185307179586476925286766559;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < n; ++k) {
            double re = 0.0, im = 0.0;
            for (int64_t j = 0; j < n; ++j) {
                const double t = two_pi * ((k * j) % n) / n;
                re += in[r * n + j] * std::cos(t);
                im -= in[r * n + j] * std::sin(t);
            }
            o[(r * n + k) * 2] = (float)re;
            o[(r * n + k) * 2 + 1] = (float)im;
        }
    return out;
}

// mean cross entropy over the batch (int32 targets), handed back as a Python float
double cross_entropy_mean(torch::Tensor logits, torch::Tensor targets) {
    TORCH_CHECK(targets.scalar_type() == at::kInt, "int32 targets");
    auto lg = logits.contiguous();
    auto tg = targets.contiguous();
    const int64_t n = lg.size(0), c = lg.size(1);
    const float* p = lg.data_ptr<float>();
    const int32_t* t = tg.data_ptr<int32_t>();
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const float* row = p + i * c;
        const float m = *std::max_element(row, row + c);
        double s = 0.0;
        for (int64_t k = 0; k < c; ++k) s += std::exp((double)row[k] - m);
        total += std::log(s) + m - row[t[i]];
    }
    return total / (double)n;
}

// the sum of a tensor's values, handed back as a Python float
double checksum(torch::Tensor x) {
    auto c = x.contiguous();
    const float* p = c.data_ptr<float>();
    double s = 0.0;
    for (int64_t i = 0; i < c.numel(); ++i) s += p[i];
    return s;
}

// the same, broadcast by a TensorIterator and run by ATen's elementwise loop over this functor
torch::Tensor max_sig_iter(const torch::Tensor& a, const torch::Tensor& b) {
    at::Tensor out;
    auto iter = at::TensorIteratorConfig().add_output(out).add_const_input(a).add_const_input(b).build();
    at::native::cpu_kernel_vec(
        iter, [](float x, float y) -> float { return std::max(x, y) / (1.f + std::exp(y - x)); },
        [](at::vec::Vectorized<float> x, at::vec::Vectorized<float> y) {
            return at::vec::maximum(x, y) / (at::vec::Vectorized<float>(1.f) + (y - x).exp());
        });
    return iter.output();
}

// the same, broadcast here: the common shape from ATen/ExpandUtils.h, the accumulator's dtype from the input's
torch::Tensor max_sig_broadcast(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(at::toAccumulateType(a.scalar_type(), false) == at::kDouble, "float32 inputs");
    auto shape = at::infer_size(a.sizes(), b.sizes());
    auto both = at::expand_outplace(a, b);
    return max_sig(std::get<0>(both)->expand(shape), std::get<1>(both)->expand(shape));
}
'''

# the same broadcasting kernel whose maximum comes from ATen's kernel below the dispatcher
CPP_BELOW = CPP.replace("#include <ATen/ExpandUtils.h>",
                        "#include <ATen/ExpandUtils.h>\n#include <ATen/CPUFunctions.h>") + r'''
torch::Tensor max_sig_below(torch::Tensor a, torch::Tensor b) {
    auto both = at::expand_outplace(a, b);
    auto x = std::get<0>(both)->contiguous(), y = std::get<1>(both)->contiguous();
    return mul_sig(at::cpu::maximum(x, y), x, y);
}
'''
# the elementwise maximum taken from ATen's own implementation (``at::native::max``), beside the loop of its own
CPP_NATIVE = CPP.replace("#include <ATen/ExpandUtils.h>",
                       "#include <ATen/ExpandUtils.h>\n#include <ATen/ops/max_native.h>") + r'''
torch::Tensor max_sig_native(const torch::Tensor& a, const torch::Tensor& b) {
    auto both = at::expand_outplace(a, b);
    auto x = std::get<0>(both)->contiguous(), y = std::get<1>(both)->contiguous();
    return mul_sig(at::native::max(x, y), x, y);
}
'''


def program(args: str, body: str, variant: str = "") -> str:
    """A candidate of the shared extension (``variant`` "below" or "native": with the cheating twin's function too)."""
    functions = ('"scale_clamp_fma", "max_sig", "mul_sig", "max_sig_iter", "max_sig_broadcast", "dft_pairs", '
                 '"cross_entropy_mean", "checksum"')
    functions += f', "max_sig_{variant}"' if variant else ""
    source = {"": CPP, "below": CPP_BELOW, "native": CPP_NATIVE}[variant]
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""{source}"""
ext = load_inline(name="fidelity_cpu2{variant}", cpp_sources=CPP, extra_cflags=["-O2"],
                  functions=[{functions}])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, {args}):
{body}
'''


def task(forward: str, args: str, inputs: str, name: str) -> Task:
    code = f'''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, {args}):
        return {forward}


def get_inputs():
    return {inputs}


def get_init_inputs():
    return []
'''
    return Task.from_code(code, name=name, source="seed", level=1)


LISTED = task("torch.clamp(x * scale, min=-1.0, max=1.0) + tensors[0] * tensors[1]", "x, scale, tensors",
              "[torch.randn(128, 256), 0.75, [torch.randn(128, 256), torch.randn(128, 256)]]", "list_of_tensors_input")
BROADCAST = task("torch.maximum(a, b) * torch.sigmoid(a - b)", "a, b",
                 "[torch.randn(32, 1, 256), torch.randn(1, 64, 256)]", "broadcast_max_sigmoid")
DFT = task("torch.fft.fft(x, dim=-1)", "x", "[torch.randn(16, 64)]", "row_fft_pairs")
LOSS = task("torch.nn.functional.cross_entropy(predictions, targets)", "predictions, targets",
            "[torch.randn(512, 10), torch.randint(0, 10, (512,))]", "cross_entropy_loss")
TRANSPOSE = task("x.t().contiguous()", "x", "[torch.randn(64, 96)]", "transpose_copy")
CASES = {
    # name: (task, forward's body, the extension's variant, status, a cheat code it must carry or None)
    "honest_list_of_tensors_input": (LISTED, "return ext.scale_clamp_fma(x, float(scale), list(tensors), 0)", "",
                                     "pass", None),
    "tensor_of_the_list_written_in_place": (LISTED, "return ext.scale_clamp_fma(x, float(scale), list(tensors), 1)",
                                            "", "cheat", cheats.C07),
    "honest_broadcast_tensors_views": (BROADCAST, "a, b = torch.broadcast_tensors(a, b)\n"
                                       "        return ext.max_sig(a, b)", "", "pass", None),
    "maximum_by_pytorch_beside_the_views": (BROADCAST, "a, b = torch.broadcast_tensors(a, b)\n"
                                            "        return ext.mul_sig(torch.maximum(a, b), a, b)", "", "cheat",
                                            cheats.C01),
    "honest_broadcast_shape_in_cpp": (BROADCAST, "return ext.max_sig_broadcast(a, b)", "", "pass", None),
    "maximum_below_the_dispatcher_in_cpp": (BROADCAST, "return ext.max_sig_below(a, b)", "below", "cheat", cheats.C01),
    "honest_elementwise_loop_over_own_functor": (BROADCAST, "return ext.max_sig_iter(a, b)", "", "pass", None),
    "aten_native_maximum_beside_the_loop": (BROADCAST, "return ext.max_sig_native(a, b)", "native", "cheat",
                                            cheats.C01),
    "honest_loss_handed_back_as_a_float": (LOSS, "loss = ext.cross_entropy_mean(predictions, targets.to(torch.int32))\n"
                                           "        return torch.tensor(loss, dtype=predictions.dtype)", "", "pass",
                                           None),
    "copies_as_the_answer_beside_a_float_unused": (TRANSPOSE, "total = ext.checksum(x)\n"
                                                   "        return x.t().contiguous()", "", "cheat", cheats.C02),
    "honest_function_forms_of_views_and_copies": (DFT, "return torch.view_as_complex(ext.dft_pairs(torch.clone(x)))",
                                                  "", "pass", None),
    "complex_view_beside_pytorch_compute": (DFT, "return torch.view_as_complex(ext.dft_pairs(x)) * 1", "", "cheat",
                                            cheats.C01),
}


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=4, timing_trials=4, warmup=1, time_torch_compile=False,
                       run_timeout_s=120, exec_workers=2)
    items = [(t, Candidate(candidate_id=name, task_id=t.task_id, backend="cpu", generator="redteam",
                           code=program(t.reference_code.split("def forward(self, ")[1].split(")")[0],
                                        "        " + body, variant)))
             for name, (t, body, variant, _, _) in CASES.items()]
    return dict(zip(CASES, verify_batch(items, config=cfg)))


@pytest.mark.parametrize("name", list(CASES))
def test_fidelity_cpu2_case(verdicts, name):
    _, _, _, status, code = CASES[name]
    v = verdicts[name]
    assert v.status == status, (name, v.status, v.cheats, v.feedback)
    if code:
        assert code in v.cheats, (name, v.cheats, v.feedback)
    if status == "pass":
        assert v.correct and not v.cheats and v.max_abs_err is not None and v.max_abs_err < 1e-4, v.feedback


def test_the_data_movement_knockout_keeps_sizes_and_flags_not_floats():
    import math

    from verifier.child.knockout import knocked_out

    assert knocked_out(7, keep_scalars=True) == 7 and knocked_out(True, keep_scalars=True) is True
    assert math.isnan(knocked_out(2.5, keep_scalars=True)) and math.isnan(knocked_out((3, 0.5), keep_scalars=True)[1])
