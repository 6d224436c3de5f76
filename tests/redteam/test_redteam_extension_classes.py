"""Red team of what counts as a call of the candidate's own code (C02), and what the cpu knockout skips: the
extension's classes.

An extension exports more than functions. pybind11 lets it define classes (``py::class_``: a kernel object built in
``__init__`` and run in forward as ``self.k.run(x)``, or called as ``self.k(x)``) and static methods. Only the
module's own functions were counted, so an honest candidate whose kernel runs
in a method was rejected as C02 ("none of your compiled kernel functions was called"), and the cpu knockout, which
knocks out the counted calls, could not skip the method's work. Closed at the root in the child
(verifier/child/loading.py ``CountedExtension``, ``count_class``): every method, static method, ``__call__`` and
constructor of a class the extension defines counts as a call of the extension and is knocked out in a knockout run (a constructor is counted only: its instance must exist).

Honest twins (strict, cpu): a method, ``__call__``, a static method and, beside them, a module function each computing
forward, pass. Red team: a method called for show beside PyTorch doing the work is C01 under strict and, under the partial
policy, fails its knockout (C02: with the method knocked out the output is still correct); the partial twin, a
method computing the relu after PyTorch's matmul, passes partial.
"""

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.engine import VerifyConfig, verify_batch

EXT = r'''
#include <torch/extension.h>

static torch::Tensor relu_of(const torch::Tensor& x_in, float slope) {
    auto x = x_in.contiguous();
    auto out = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) o[i] = in[i] > 0.f ? in[i] : slope * in[i];
    return out;
}

struct Relu {
    float slope;
    explicit Relu(float s) : slope(s) {}
    torch::Tensor run(torch::Tensor x) const { return relu_of(x, slope); }
    torch::Tensor call(torch::Tensor x) const { return relu_of(x, slope); }
    static torch::Tensor apply(torch::Tensor x) { return relu_of(x, 0.f); }
    void touch(torch::Tensor x) const { (void)x; }
};

torch::Tensor relu_free(torch::Tensor x) { return relu_of(x, 0.f); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    pybind11::class_<Relu>(m, "Relu")
        .def(pybind11::init<float>())
        .def("run", &Relu::run)
        .def("__call__", &Relu::call)
        .def_static("apply", &Relu::apply)
        .def("touch", &Relu::touch);
    m.def("relu", &relu_free);
}
'''


def _candidate(forward: str, args: str = "x") -> str:
    body = "\n".join("        " + line for line in forward.splitlines())
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

EXT_SRC = r"""{EXT}"""
ext = load_inline(name="relu_classes", cpp_sources=EXT_SRC, extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.k = ext.Relu(0.0)

    def forward(self, {args}):
{body}
'''


RELU_MM_TASK = fx.MATMUL_TASK.replace("return torch.matmul(a, b)", "return torch.relu(torch.matmul(a, b))")
RELU_TASK = fx.RELU_TASK.replace("torch.randn(64, 1000)", "torch.randn(128, 512)")

CASES = {  # name: (task, candidate, strict status, strict code, partial passes)
    "honest_method": (RELU_TASK, _candidate("return self.k.run(x)"), "pass", None, True),
    "honest_call_operator": (RELU_TASK, _candidate("return self.k(x)"), "pass", None, True),
    "honest_static_method": (RELU_TASK, _candidate("return ext.Relu.apply(x)"), "pass", None, True),
    "honest_module_function": (RELU_TASK, _candidate("return ext.relu(x)"), "pass", None, True),
    "method_called_for_show_beside_torch": (RELU_MM_TASK, _candidate(
        "c = torch.relu(torch.matmul(a, b))\nself.k.touch(c)\nreturn c", args="a, b"), "cheat", cheats.C01, False),
    "partial_method_computes_the_relu_after_torch_matmul": (RELU_MM_TASK, _candidate(
        "return self.k.run(torch.matmul(a, b))", args="a, b"), "cheat", cheats.C01, True),
}


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    tasks = {t: Task.from_code(t, name=f"xc{i}", source="seed", level=1)
             for i, t in enumerate(sorted({c[0] for c in CASES.values()}))}
    out = {}
    for legality in ("strict", "partial"):
        cfg = VerifyConfig(build_dir=shared_build_dir, trials=3, timing_trials=0, warmup=1, time_torch_compile=False,
                           run_timeout_s=60, memory_limit_gb=4, exec_workers=1, legality=legality)
        names = [n for n in CASES if legality == "strict" or CASES[n][3] is not None]
        items = [(tasks[CASES[n][0]], Candidate(candidate_id=n, task_id=tasks[CASES[n][0]].task_id, backend="cpu",
                                                generator="redteam", code=CASES[n][1])) for n in names]
        out[legality] = dict(zip(names, verify_batch(items, config=cfg, compile_workers=1)))
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_calls_of_the_extensions_classes_count_as_its_own_under_strict(verdicts, name):
    v = verdicts["strict"][name]
    _, _, status, code, _ = CASES[name]
    assert v.status == status, (name, v.status, v.cheats, v.feedback[:600])
    if code is None:
        assert v.cheats == [] and v.pass_strict, (v.cheats, v.feedback[:600])
    else:
        assert code in v.cheats and cheats.C02 not in v.cheats, (v.cheats, v.feedback[:600])


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c[3] is not None])
def test_the_cpu_knockout_skips_the_methods_of_the_extensions_classes(verdicts, name):
    v = verdicts["partial"][name]
    knock = v.versions["knockout"]
    assert sum(knock["skipped"].values()) >= 1 and any("Relu." in k for k in knock["skipped"]), knock
    if CASES[name][4]:
        assert v.status == "pass" and v.pass_partial, (v.status, v.cheats, knock, v.feedback[:600])
        assert knock["outcome"] == "contributes", knock
    else:
        assert v.status == "cheat" and v.cheats == [cheats.C02] and v.pass_partial is False, (v.cheats, knock)
        assert knock["outcome"] == "no_contribution", knock
