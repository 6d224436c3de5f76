"""Red team of the slim build (verifier/build/slim.py): a build variant never changes what the source means
(``torch::tensor`` is 0-dim with torch's headers and was a 1-element 1-D tensor under the slim prelude); a factory
is mapped to ``at::`` only where every overload is the same, and the prelude compiles to what torch's headers mean."""

import shutil
import subprocess
from pathlib import Path

import pytest

from verifier.build.pool import build_variants, canonical_spec
from verifier.build.slim import _ops_dir, _torch_factories, slim_source


def _variant_labels(cu: str) -> list[str]:
    spec = canonical_spec({"cpp_sources": "torch::Tensor f(torch::Tensor x);", "cuda_sources": cu,
                           "functions": ["f"]})
    return [label for label, _ in build_variants(spec)]


MEAN_CU = '''#include <torch/extension.h>
__global__ void k(const float* x, float* s, int n) { }
torch::Tensor f(torch::Tensor x) {
    auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(x.device());
    float sum = 1.f; int n = 2;
    return torch::tensor(sum / n, opts);
}
'''


@pytest.mark.parametrize("cu,slim", [
    (MEAN_CU, False),  # 0-dim with torch's headers, 1-D as at::tensor(T value, opts)
    (MEAN_CU.replace("torch::tensor(sum / n, opts)", "torch::tensor({sum, sum}, opts)"), False),
    (MEAN_CU.replace("return torch::tensor(sum / n, opts);",
                     "auto b = torch::from_blob(&sum, {1}, opts); return b.clone();"), False),
    (MEAN_CU.replace("torch::tensor(sum / n, opts)", "torch::zeros({n}, opts.requires_grad(true))"), False),
    # the same values through names that mean the same thing under both preludes
    (MEAN_CU.replace("torch::tensor(sum / n, opts)", "at::tensor(sum / n, opts)"), True),
    (MEAN_CU.replace("torch::tensor(sum / n, opts)", "torch::full({}, sum / n, opts)"), True),
    (MEAN_CU.replace("torch::tensor(sum / n, opts)", "torch::scalar_tensor(sum / n, opts)"), True),
    (MEAN_CU.replace("torch::tensor(sum / n, opts)", "torch::zeros({n}, opts)"), True),
    (MEAN_CU.replace("return torch::tensor(sum / n, opts);",
                     "// torch::tensor(sum / n, opts) would be 0-dim\n    return torch::empty_like(x);"), True),
], ids=["torch_tensor_scalar", "torch_tensor_list", "torch_from_blob", "requires_grad_option", "at_tensor",
        "torch_full", "torch_scalar_tensor", "torch_zeros", "torch_tensor_in_a_comment"])
def test_slim_build_is_not_used_where_it_would_change_the_meaning(cu, slim):
    labels = _variant_labels(cu)
    assert labels[-1] == "full" and ("slim" in labels) == slim, labels


def test_slim_maps_a_torch_factory_to_at_only_where_every_overload_is_the_same():
    factories, exact = _torch_factories(_ops_dir())
    assert {"tensor", "from_blob"} <= factories - exact
    assert {"empty", "empty_like", "zeros", "ones", "full", "arange", "randn", "randint", "scalar_tensor"} <= exact


SEMANTICS_BODY = r'''
#include <cstdio>
static void show(const char* what, const at::Tensor& t) {
    std::printf("%s dim=%d numel=%d dtype=%s req=%d sum=%.3f\n", what, (int)t.dim(), (int)t.numel(),
                c10::toString(t.scalar_type()), (int)t.requires_grad(),
                t.numel() ? t.to(at::kDouble).sum().item<double>() : 0.0);
}
int main() {
    auto opts = torch::TensorOptions().dtype(torch::kFloat32);
    float sum = 3.f; int n = 2;
    auto x = torch::ones({2, 3}, opts);
    show("zeros", torch::zeros({n}, opts));
    show("full", torch::full({}, sum / n, opts));
    show("scalar_tensor", torch::scalar_tensor(sum / n, opts));
    show("at_tensor", at::tensor(sum / n, opts));
    show("arange", torch::arange(5));
    show("arange_f", torch::arange(0, 5, opts));
    show("randint", torch::randint(1, 2, {4}));  // dtype from the default options; values all 1
    show("zeros_like", torch::zeros_like(x, torch::kDouble));
    show("ones_like", torch::ones_like(x));
    return 0;
}
'''


@pytest.mark.slow
def test_slim_prelude_compiles_to_what_torch_headers_mean(tmp_path):
    """The slim prelude and torch's own header, compiled and run (host code, g++ against libtorch_cpu): the
    factories the slim build accepts give tensors of the same shape, dtype and values."""
    import torch

    cxx = shutil.which("g++")
    assert cxx
    src = "#include <torch/extension.h>\n" + SEMANTICS_BODY
    slim = slim_source(src)
    assert slim is not None
    tdir = Path(torch.__file__).parent
    inc = [f"-I{tdir / 'include'}", f"-I{tdir / 'include' / 'torch' / 'csrc' / 'api' / 'include'}",
           "-I/usr/local/cuda/include"]
    outs = {}
    for label, text in (("slim", slim), ("full", "#include <torch/types.h>\n" + SEMANTICS_BODY)):
        (tmp_path / f"{label}.cpp").write_text(text)
        subprocess.run([cxx, "-std=c++17", "-O0", "-w", *inc, str(tmp_path / f"{label}.cpp"), "-o",
                        str(tmp_path / label), f"-L{tdir / 'lib'}", "-ltorch_cpu", "-lc10",
                        f"-Wl,-rpath,{tdir / 'lib'}"], check=True, capture_output=True)
        outs[label] = subprocess.run([str(tmp_path / label)], check=True, capture_output=True, text=True).stdout
    assert outs["slim"] == outs["full"] and "randint dim=1 numel=4 dtype=Long" in outs["full"], outs
