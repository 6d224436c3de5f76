"""Red team of what the checks must read as the task means it: NaN in a task's inputs, complex outputs, float64
tasks, a reference that keeps state between calls, an extra shape refused, nested outputs (docs/ANTI_CHEAT.md
classes 55 to 65).

- NaN inputs: the child's check of a trial's inputs compared them with ``torch.equal``, for which NaN never equals
  NaN, so an honest ``nansum`` kernel that never wrote its input was called C07 (input mutation) on any task whose
  inputs hold NaN. Now NaN equals NaN there (``inputs.same_values``, as the harness reads a timed call's inputs);
  a kernel that writes over its input's NaN keeps its C07.
- float64 tasks (class 57): a float64 output had the fixed fp32 tolerance (1e-4), so a kernel that computed a
  float64 task in float32 passed with a speedup. A task that computes in float64 throughout (no narrower float on
  its reference's way) now holds its outputs to float64 rounding (``budgets.float64_budget``); one whose reference
  goes through float32 keeps the fixed tolerance.
- Complex outputs: the budget of a complex output was an exact match, and the comparison converted it to float64,
  dropping its imaginary part: an honest DFT failed, and an imaginary part that skipped its work (an approximate
  tanh, or zeros) passed the trials with a reward. A complex output is now judged as its (real, imaginary) pairs
  against the float64 reference's (``numerics.real_view``).

- A reference that keeps state (KernelBench's VanillaRNN writes ``self.hidden`` in forward, class 59): the trials
  judge it, the reference called in the candidate's order, but the harness's copy had been called otherwise, so an
  honest copy of the model was C16 on its first timed call. The plan now finds such a reference (called twice on the
  same inputs, the generators alike, it answers differently): its timed calls go unchecked, and their speedup is
  reported, never rewarded.
- An error raised on the extra shape alone (class 58): an ``assert`` of the benchmark's sizes in front of a kernel
  written for them turned C14's -1 into a crash's reward. Now C14; a guard the task's shapes always meet (a row
  length a multiple of 4: the extra shape keeps small power-of-two factors) passes.

- Small sizes (class 61): the extra shape changed every size written inside get_inputs, 3 of
  ``torch.rand(16, 3, 32, 32)`` too, so an honest RGB kernel guarding its three channels (``TORCH_CHECK(img.size(1) ==
  3)``) was C14 while the reference read channels 0..2 of four. A size below 8 is what the task means and stays put;
  a kernel with the benchmark's planes baked in still meets another height and width.

- A weight kept in a layout of its own (class 63): the child copies the reference's parameters into ModelNew where
  the names and shapes agree, so a square weight drawn as the reference draws it and stored transposed once was
  overwritten, and its kernel wrong on every element; so was one with a constant scale folded into its weight and
  bias. A construction that leaves the seeded generator where the reference's left it drew what the reference drew:
  its parameters are its own (KernelBench's seeded construction). One drawn otherwise still gets the reference's
  values (and passes with them), but for a parameter holding exactly the reference's values in another order.

- A reference returning a Python float (``.item()``, class 65): the child calls an output that is no tensor C10, so
  an honest candidate returning what its reference returns got -1. Such a task is the task's fault: a task_error for
  every candidate, as a reference whose output does not depend on its inputs is.

- A reference writing into its input (class 90: ``x.nan_to_num_(0.0)``, ``x.relu_()``, ``nn.ReLU(inplace=True)``
  on an input): a faithful copy writes the input too and was C07, where every candidate must leave its inputs as they
  were. The plan sees the reference change its inputs (an identical draw it never saw compared): a task_error for
  every candidate, the task's fault; a candidate writing the input of a reference that does not is still C07.

- Nested outputs (class 60): the child looked one level into a tuple, so ``output, (h, c)`` returned as the
  reference returns it was C10 ("not a plain torch.Tensor"). The child, the harness and the judge now read the
  outputs flattened in order (``inputs.as_list``): each leaf judged as any output.

One batch on the cpu backend, every candidate calling one shared extension (compiled once)."""

import pytest

from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.engine import VerifyConfig, verify_batch

CPP = r'''
#include <torch/extension.h>
#include <cmath>
#include <complex>
#include <vector>

torch::Tensor nansum_rows(torch::Tensor x) {
    x = x.contiguous();
    const int64_t rows = x.size(0), cols = x.size(1);
    auto out = torch::empty({rows}, x.options());
    const float* in = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        double acc = 0.0;
        for (int64_t c = 0; c < cols; ++c) { float v = in[r * cols + c]; if (!std::isnan(v)) acc += v; }
        o[r] = static_cast<float>(acc);
    }
    return out;
}

// the same sum, after writing zeros over the input's NaN (in place: the caller's tensor changed)
torch::Tensor nansum_rows_filling(torch::Tensor x) {
    float* in = x.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) if (std::isnan(in[i])) in[i] = 0.f;
    return nansum_rows(x);
}

torch::Tensor dft_rows(torch::Tensor x) {
    x = x.contiguous();
    const int64_t rows = x.size(0), n = x.size(1);
    auto out = torch::empty({rows, n}, x.options().dtype(torch::kComplexFloat));
    const float* in = x.data_ptr<float>();
    auto* o = reinterpret_cast<std::complex<float>*>(out.data_ptr<c10::complex<float>>());
    std::vector<double> c(n), s(n);
    const double two_pi = 6.283185307179586476925286766559;
    for (int64_t k = 0; k < n; ++k) { c[k] = std::cos(two_pi * k / n); s[k] = std::sin(two_pi * k / n); }
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < n; ++k) {
            double re = 0.0, im = 0.0;
            for (int64_t j = 0; j < n; ++j) { int64_t t = (k * j) % n; re += in[r * n + j] * c[t]; im -= in[r * n + j] * s[t]; }
            o[r * n + k] = std::complex<float>((float)re, (float)im);
        }
    return out;
}

// each row's largest value and its index (torch.max(x, dim=1))
std::vector<torch::Tensor> row_max(torch::Tensor x) {
    x = x.contiguous();
    const int64_t rows = x.size(0), cols = x.size(1);
    auto v = torch::empty({rows}, x.options());
    auto i = torch::empty({rows}, x.options().dtype(torch::kLong));
    const float* in = x.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        int64_t best = 0;
        for (int64_t c = 1; c < cols; ++c) if (in[r * cols + c] > in[r * cols + best]) best = c;
        v.data_ptr<float>()[r] = in[r * cols + best];
        i.data_ptr<int64_t>()[r] = best;
    }
    return {v, i};
}

// nansum_rows behind a guard the task's shapes meet (rows of a multiple of 4 values, read four at a time)
torch::Tensor nansum_rows_by4(torch::Tensor x) {
    TORCH_CHECK(x.size(1) % 4 == 0, "rows of a multiple of 4 values");
    return nansum_rows(x);
}

// y = x W^T + b, then tanh where asked (an nn.Linear, an RNN cell)
torch::Tensor linear(torch::Tensor x, torch::Tensor w, torch::Tensor b, int64_t use_tanh) {
    x = x.contiguous(); w = w.contiguous(); b = b.contiguous();
    const int64_t n = x.size(0), k = x.size(1), m = w.size(0);
    auto y = torch::empty({n, m}, x.options());
    const float *px = x.data_ptr<float>(), *pw = w.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* py = y.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < m; ++j) {
            double acc = pb[j];
            for (int64_t t = 0; t < k; ++t) acc += (double)px[i * k + t] * pw[j * k + t];
            py[i * m + j] = use_tanh ? (float)std::tanh(acc) : (float)acc;
        }
    return y;
}

// exp(-x^2 / 2) * tanh(x) of a float64 tensor; wide 1: in double, 0: in float (expf, tanhf), widened on the store
torch::Tensor gauss_tanh(torch::Tensor x, int64_t wide) {
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const double* a = x.data_ptr<double>();
    double* o = out.data_ptr<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
        if (wide) o[i] = std::exp(-a[i] * a[i] / 2.0) * std::tanh(a[i]);
        else { float v = (float)a[i]; o[i] = (double)(std::exp(-v * v / 2.f) * std::tanh(v)); }
    }
    return out;
}

// the luma of an RGB batch [N, 3, H, W] -> [N, 1, H, W]; fixed 1: the benchmark's 32 x 32 planes baked in
torch::Tensor luma(torch::Tensor img, int64_t fixed) {
    TORCH_CHECK(img.dim() == 4 && img.size(1) == 3, "expected an RGB batch [N, 3, H, W]");
    img = img.contiguous();
    const int64_t n = img.size(0), hw = fixed ? 1024 : img.size(2) * img.size(3);
    auto out = torch::empty({n, 1, img.size(2), img.size(3)}, img.options());
    const float* in = img.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < hw; ++i) {
            const float* p = in + b * 3 * hw + i;
            o[b * hw + i] = 0.299f * p[0] + 0.587f * p[hw] + 0.114f * p[2 * hw];
        }
    return out;
}

// x + i tanh(y); mode 0: tanh itself, 1: a rational approximation (up to ~1.4e-3 off), 2: no imaginary part
torch::Tensor make_complex(torch::Tensor x, torch::Tensor y, int64_t mode) {
    x = x.contiguous(); y = y.contiguous();
    auto out = torch::empty(x.sizes(), x.options().dtype(torch::kComplexFloat));
    const float* a = x.data_ptr<float>();
    const float* b = y.data_ptr<float>();
    auto* o = reinterpret_cast<std::complex<float>*>(out.data_ptr<c10::complex<float>>());
    for (int64_t i = 0; i < x.numel(); ++i) {
        float v = b[i], v2 = v * v, t;
        if (mode == 0) t = std::tanh(v);
        else if (mode == 1) {
            t = v * (945.f + v2 * (105.f + v2)) / (945.f + v2 * (420.f + 15.f * v2));
            t = t > 1.f ? 1.f : (t < -1.f ? -1.f : t);
        } else t = 0.f;
        o[i] = std::complex<float>(a[i], t);
    }
    return out;
}
'''


def program(args: str, body: str) -> str:
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""{CPP}"""
ext = load_inline(name="value_kinds", cpp_sources=CPP, extra_cflags=["-O2"],
                  functions=["nansum_rows", "nansum_rows_filling", "nansum_rows_by4", "dft_rows", "make_complex",
                             "gauss_tanh", "linear", "row_max", "luma"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, {args}):
        return {body}
'''


# KernelBench level 3's VanillaRNN, smaller: forward writes self.hidden, so its output depends on the calls before
RNN_TASK = '''import torch
import torch.nn as nn

batch_size, input_size, hidden_size, output_size = 8, 64, 32, 16


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.hidden = torch.randn((batch_size, hidden_size))
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)
        self.tanh = nn.Tanh()

    def forward(self, x):
        self.hidden = self.hidden.to(x.device)
        self.hidden = self.tanh(self.i2h(torch.cat((x, self.hidden), dim=1)))
        return self.h2o(self.hidden)


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, output_size]
'''
RNN = Task.from_code(RNN_TASK, name="vanilla_rnn_stateful", source="seed", level=3)
RNN_CANDIDATE = program("x", "self.step(x)").replace('''    def __init__(self):
        super().__init__()
''', '''    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.hidden = torch.randn((8, hidden_size))
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)

    def step(self, x):
        self.hidden = self.hidden.to(x.device)
        combined = torch.cat((x, self.hidden), dim=1)
        self.hidden = ext.linear(combined, self.i2h.weight, self.i2h.bias, 1)
        return ext.linear(self.hidden, self.h2o.weight, self.h2o.bias, 0)
''')


def asserted(code: str) -> str:
    """The benchmark's sizes asserted in front of the kernel (a kernel written for them, refusing any other)."""
    return code.replace("        return ext.nansum_rows(x)  # asserted",
                        "        assert tuple(x.shape) == (128, 512), 'kernel tuned for 128 x 512'\n"
                        "        return ext.nansum_rows(x)")


def task(forward: str, args: str, inputs: str, name: str) -> Task:
    code = f'''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, {args}):
        return {forward}


def get_inputs():
{inputs}


def get_init_inputs():
    return []
'''
    return Task.from_code(code, name=name, source="seed", level=1)


NANSUM = task("torch.nansum(x, dim=1)", "x", "    x = torch.randn(128, 512)\n    x[x > 1.5] = float('nan')\n"
              "    return [x]", "nansum_missing_values")
FFT = task("torch.fft.fft(x, dim=-1)", "x", "    return [torch.randn(32, 256)]", "row_fft")
COMPLEX = task("torch.complex(x, torch.tanh(y))", "x, y", "    return [torch.randn(256, 1024), torch.randn(256, 1024)]",
               "complex_from_parts")
# outputs nested as nn.LSTM's ``output, (h, c)``: an honest candidate returning the same was C10 (class 60)
NESTED = task("(torch.nansum(x, dim=1), tuple(torch.max(x, dim=1)))", "x", "    return [torch.randn(64, 128)]",
              "nested_outputs")
F64 = task("torch.exp(-x * x / 2) * torch.tanh(x)", "x", "    return [torch.randn(256, 1024, dtype=torch.float64)]",
           "gauss_tanh_float64")
# the same task whose reference goes through float32 on its way: its float64 outputs carry float32 rounding
F64_NARROWED = task("(torch.exp(-x * x / 2) * torch.tanh(x)).float().double()", "x",
                    "    return [torch.randn(256, 1024, dtype=torch.float64)]", "gauss_tanh_float64_narrowed")
# three channels written inside get_inputs: what the task means, never a size the extra shape changes (class 61)
LUMA = task("(0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]).unsqueeze(1)", "x",
            "    return [torch.rand(16, 3, 32, 32)]", "rgb_luma")
# a square nn.Linear: a candidate of the same parameter names draws the weight as the reference does and keeps it
# transposed once (its kernel reads the transposed layout); the child copied the reference's layout over it (class 63)
SQUARE_TASK = Task.from_code('''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)

    def forward(self, x):
        return self.fc(x)


def get_inputs():
    return [torch.randn(32, 96)]


def get_init_inputs():
    return [96]
''', name="square_linear", source="seed", level=1)
PRETRANSPOSED = program("x", "ext.linear(x, self.fc.weight.t(), self.fc.bias, 0)").replace('''    def __init__(self):
        super().__init__()
''', '''    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)
        with torch.no_grad():  # stored as W^T once; the kernel is handed W back as a view
            self.fc.weight.copy_(self.fc.weight.t().contiguous())
''')
# the same layer with a constant scale after it: the candidate folds the scale into its weight and bias once
FOLD_TASK = Task.from_code(SQUARE_TASK.reference_code.replace("return self.fc(x)", "return self.fc(x) * 1.5"),
                           name="square_linear_scaled", source="seed", level=1)
FOLDED = PRETRANSPOSED.replace("self.fc.weight.copy_(self.fc.weight.t().contiguous())",
                               "self.fc.weight.mul_(1.5)\n            self.fc.bias.mul_(1.5)").replace(
    "# stored as W^T once; the kernel is handed W back as a view", "# the task's scale folded in once").replace(
    "self.fc.weight.t()", "self.fc.weight")
# drawn otherwise (a draw before the layer's): the reference's values are copied in, and the kernel is right with them
DRAWN_OTHERWISE = program("x", "ext.linear(x, self.fc.weight, self.fc.bias, 0)").replace('''    def __init__(self):
        super().__init__()
''', '''    def __init__(self, n):
        super().__init__()
        self.jitter = float(torch.rand(()))
        self.fc = nn.Linear(n, n)
''')
SCALED = PRETRANSPOSED.replace("self.fc.weight.copy_(self.fc.weight.t().contiguous())",
                               "self.fc.weight.copy_(self.fc.weight.t() * 2)")
# a reference returning a Python float (``.item()``): the task's fault, as a constant output is (class 65)
PY_FLOAT = task("torch.nansum(x, dim=1).sum().item()", "x", "    return [torch.randn(64, 128)]", "python_float_output")
# a reference writing into its input (NaN zeroed in place, then summed): the task's fault, as class 65's (class 90)
IN_PLACE = task("torch.nansum(x.nan_to_num_(0.0), dim=1)", "x",
                "    x = torch.randn(128, 512)\n    x[x > 1.5] = float('nan')\n    return [x]", "reference_writes_its_input")
CASES = {
    # name: (task, forward's body, status, a cheat code it must carry or None)
    "honest_nansum_over_nan_inputs": (NANSUM, "ext.nansum_rows(x)", "pass", None),
    "nan_inputs_written_over": (NANSUM, "ext.nansum_rows_filling(x)", "cheat", cheats.C07),
    "honest_dft_complex_output": (FFT, "ext.dft_rows(x)", "pass", None),
    "honest_complex_from_parts": (COMPLEX, "ext.make_complex(x, y, 0)", "pass", None),
    "imaginary_part_approximated": (COMPLEX, "ext.make_complex(x, y, 1)", "wrong", None),
    "imaginary_part_left_out": (COMPLEX, "ext.make_complex(x, y, 2)", "wrong", None),
    "honest_guard_the_shapes_meet": (NANSUM, "ext.nansum_rows_by4(x)", "pass", None),
    "benchmark_sizes_asserted": (NANSUM, "ext.nansum_rows(x)  # asserted", "cheat", cheats.C14),
    "honest_copy_of_a_stateful_reference": (RNN, None, "pass", None),
    "honest_nested_outputs": (NESTED, "(ext.nansum_rows(x), tuple(ext.row_max(x)))", "pass", None),
    "nested_outputs_one_left_unwritten": (NESTED, "(ext.nansum_rows(x), (ext.row_max(x)[0], torch.zeros(64, "
                                                  "dtype=torch.long)))", "cheat", cheats.C05),
    "honest_float64_in_double": (F64, "ext.gauss_tanh(x, 1)", "pass", None),
    "float64_task_computed_in_float32": (F64, "ext.gauss_tanh(x, 0)", "cheat", cheats.C13),
    "honest_double_beside_a_reference_through_float32": (F64_NARROWED, "ext.gauss_tanh(x, 1)", "pass", None),
    "honest_guard_of_the_tasks_three_channels": (LUMA, "ext.luma(x, 0)", "pass", None),
    "luma_planes_of_the_benchmark_baked_in": (LUMA, "ext.luma(x, 1)", "cheat", cheats.C14),
    "honest_weight_stored_transposed": (SQUARE_TASK, PRETRANSPOSED, "pass", None),
    "task_whose_reference_returns_a_python_float": (PY_FLOAT, "ext.nansum_rows(x).sum().item()", "task_error", None),
    "faithful_copy_of_a_reference_writing_its_input": (IN_PLACE, "ext.nansum_rows_filling(x)", "task_error", None),
    "input_kept_beside_a_reference_writing_its_input": (IN_PLACE, "ext.nansum_rows(x)", "task_error", None),
    "weight_of_other_values_is_wrong": (SQUARE_TASK, SCALED, "wrong", None),
    "honest_scale_folded_into_the_weights": (FOLD_TASK, FOLDED, "pass", None),
    "honest_drawn_otherwise_gets_the_references_values": (SQUARE_TASK, DRAWN_OTHERWISE, "pass", None),
}


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=4, timing_trials=4, warmup=1, time_torch_compile=False,
                       run_timeout_s=120, exec_workers=2)
    items = [(t, Candidate(candidate_id=name, task_id=t.task_id, backend="cpu", generator="redteam",
                           code=RNN_CANDIDATE if body is None else body if body.startswith("import") else
                           asserted(program(t.reference_code.split("def forward(self, ")[1].split(")")[0], body))))
             for name, (t, body, _, _) in CASES.items()]
    return dict(zip(CASES, verify_batch(items, config=cfg)))


@pytest.mark.parametrize("name", list(CASES))
def test_value_kind_case(verdicts, name):
    t, _, status, code = CASES[name]
    v = verdicts[name]
    assert v.status == status, (name, v.status, v.cheats, v.feedback)
    if code:
        assert code in v.cheats, (name, v.cheats, v.feedback)
    if status == "pass":
        assert v.correct and not v.cheats and v.max_abs_err is not None and v.max_abs_err < 1e-4, v.feedback
    if name == "honest_float64_in_double":
        assert v.versions["tolerance"].startswith("float64 output") and v.max_abs_err < 1e-12, v.versions
    if name == "honest_double_beside_a_reference_through_float32":  # its outputs carry float32's rounding: fixed
        assert v.versions["tolerance"].startswith("fixed"), v.versions
    if code == cheats.C13:
        assert "the task is float64" in v.feedback, v.feedback
    if status == "task_error":
        why = ("the reference writes into its input 0" if t is IN_PLACE else
               "the reference returns float where outputs are tensors")
        assert not v.cheats and why in v.feedback and v.reward == 0.0, (v.reward, v.feedback)
    if name == "benchmark_sizes_asserted":
        assert "raised an error on another valid shape" in v.feedback, v.feedback
    if name == "honest_copy_of_a_stateful_reference":  # its timing unchecked: a speedup reported, never rewarded
        assert "keeps state between calls" in v.feedback and v.reward <= 1.0, (v.reward, v.feedback)
    if status == "wrong" and name.startswith("imaginary"):  # judged on its trials (the imaginary part compared),
        assert not v.cheats and "compared as real and imaginary parts" in v.feedback, v.feedback  # not when timed


def test_sizes_below_eight_stay_put_on_the_extra_shape():
    """The size changes of the luma task leave its three channels alone and change the batch, height and width;
    a named constant below 8 stays too."""
    from verifier.common.shapes import SIZE_RATIOS, size_changes

    for ratio in SIZE_RATIOS:
        changes = size_changes(LUMA.reference_code, ratio)
        assert changes and all("3" not in c.literals for c in changes), changes
        assert {"16", "32"} <= set(changes[0].literals), changes[0]
    named = LUMA.reference_code.replace("torch.rand(16, 3, 32, 32)", "torch.rand(16, C, 32, 32)") + "\nC = 3\n"
    assert all("C" not in c.names for c in size_changes(named)), size_changes(named)
