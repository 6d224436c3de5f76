"""Red team of the extract and static stages (and the source / binary / slim-build checks they feed): forms real
model-written solutions use that were rejected, each next to the cheat it resembles, which must still be caught.

1. ``ModelNew = Model`` / ``ModelNew = FastConv``: the name bound to a class is ModelNew, and every static check
   analyses that class.
2. Unusual but valid Python (tuple-keyed tables, ``**`` in dicts, starred args, walrus, match, f-strings with format
   specs...) never crashes the scan; an internal failure is a ``StaticScanError`` for that one candidate.
3. Kernels launched through the runtime / driver API (cudaLaunchKernel(Ex), cooperative launches, cuLaunchKernel
   after cudaGetFuncBySymbol or cuModuleGetFunction, graphs) are not "never launched".
4. An unused vendor include or ``-l`` flag is not vendor compute; calls are, and a name the preprocessor builds is
   caught by the built module's imported symbols.
6. ``nn.Sequential`` of the candidate's own modules is not an nn layer; classes nothing uses are not scanned as if
   forward called them.
7. Triton programs and ``cpp_extension.load`` from files get an extract error that says they are out of scope.
   A kernel nobody launches beside cuBLAS or torch compute is C02 and C01 both.
8. The dlopen / dlsym that CUDA 13's CCCL headers (cub, thrust) import into any module is not vendor compute; the
   same import without them, or a dlopen the candidate writes beside a CUB include, still is.
The slim build's meaning (tests/redteam/test_redteam_slim.py) and reflection
(tests/redteam/test_redteam_reflection.py) have files of their own.
"""

import ast
import shutil
import subprocess
import sys

import pytest

from verifier import cheats
from verifier.front import static_program
from verifier.front.extract import (
    check_candidate_shape,
    extract_code,
    model_new_binding,
)
from verifier.front.static import StaticScanError, scan
from verifier.front.binary import scan_library
from verifier.front.vendor import code_text, scan_sources

HEAD = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = "torch::Tensor relu(torch::Tensor x);"
ext = load_inline(name="relu_ext", cpp_sources=CPP, functions=["relu"], extra_cflags=["-O2"])
'''


def findings(code: str) -> list[str]:
    return [str(f) for f in scan(code).findings]


def codes(code: str) -> list[str]:
    return scan(code).cheat_codes


# ---------------------------------------------------------------------------- 1. ModelNew bound to a class

# what real solutions write: the class keeps the reference's name (its own code now), then the alias
ALIAS_OWN_MODEL = HEAD + '''

class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return ext.relu(x.contiguous())


ModelNew = Model
'''
ALIAS_OTHER_NAME = HEAD + '''

class FastReLU(nn.Module):
    """ReLU through the extension."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))  # parameters are construction, not forward

    def forward(self, x):
        return ext.relu(x)


Impl = FastReLU
ModelNew = Impl
'''


def test_modelnew_bound_to_a_class_of_the_program_is_modelnew():
    for code in (ALIAS_OWN_MODEL, ALIAS_OTHER_NAME):
        assert check_candidate_shape(code, "cpu") == [], code
        assert findings(code) == []
    b = model_new_binding(ast.parse(ALIAS_OTHER_NAME))
    assert b.cls is not None and b.cls.name == "FastReLU" and b.alias == "Impl"
    # the response's block that binds ModelNew is the one taken
    resp = f"Plan:\n```python\nprint('scratch')\n```\nFinal:\n```python\n{ALIAS_OWN_MODEL}```\n"
    assert extract_code(resp) == ALIAS_OWN_MODEL


@pytest.mark.parametrize("code,code_", [
    # the bound class inherits the reference and calls its forward
    (HEAD + "from reference import Model\n\nclass Fast(Model):\n    def forward(self, x):\n"
            "        return super().forward(x)\n\nModelNew = Fast\n", cheats.C04),
    # bound to the reference Model itself
    (HEAD + "from reference import Model\nModelNew = Model\n", cheats.C04),
    # the bound class computes with PyTorch
    (HEAD + "class Fast(nn.Module):\n    def forward(self, x):\n        return torch.matmul(x, x.t())\n\n"
            "ModelNew = Fast\n", cheats.C01),
    # every ModelNew check reads the bound class: a fallback, numpy host compute, an nn layer's forward
    (HEAD + "class Fast(nn.Module):\n    def forward(self, x):\n        try:\n            return ext.relu(x)\n"
            "        except Exception:\n            return x.clamp(min=0)\n\nModelNew = Fast\n", cheats.C03),
    (HEAD + "import numpy as np\nclass Fast(nn.Module):\n    def forward(self, x):\n"
            "        return torch.from_numpy(np.maximum(x.numpy(), 0))\n\nModelNew = Fast\n", cheats.C01),
    (HEAD + "class Fast(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.fc = nn.Linear(8, 8)\n    def forward(self, x):\n        return self.fc(ext.relu(x))\n\n"
            "ModelNew = Fast\n", cheats.C01),
    # the bound class never calls the extension
    (HEAD + "class Fast(nn.Module):\n    def forward(self, x):\n        return x.new_zeros(x.shape)\n\n"
            "ModelNew = Fast\n", cheats.C02),
], ids=["inherits_model_super_forward", "bound_to_reference_model", "torch_matmul", "try_except_fallback",
        "numpy_host_compute", "nn_linear_forward", "kernel_never_called"])
def test_cheats_behind_a_modelnew_alias_are_still_caught(code, code_):
    assert check_candidate_shape(code, "cpu") == []
    assert code_ in codes(code), findings(code)


def test_modelnew_bound_to_something_not_a_class_is_an_extract_problem():
    probs = check_candidate_shape(HEAD + "def make():\n    return nn.Identity\n\nModelNew = make()\n", "cpu")
    assert any("ModelNew" in p and "not a class" in p for p in probs), probs
    assert any("ModelNew" in p for p in check_candidate_shape(HEAD + "X = 1\n", "cpu"))


# ---------------------------------------------------------------------------- 2. unusual Python never crashes

ODD_PYTHON = {
    "tuple_keys": "_TUNED = {(1, 131072, 64): (8, 64, 512), (2, 4096, 128): (4, 128, 256)}\n",
    "dict_unpacking": "BASE = {'a': 1}\nCFG = {**BASE, 'b': 2, **{'c': 3}}\nLIST = [*CFG, 'd']\n",
    "starred_and_kwargs": "def launch(*args, **kw):\n    return args, kw\nPAIR = launch(*[1, 2], **{'k': 3})\n",
    "walrus_and_match": "def pick(n):\n    if (m := n * 2) > 4:\n        pass\n    match m:\n"
                        "        case [1, *rest]:\n            return rest\n        case {'k': v, **kw}:\n"
                        "            return v\n        case int() if m > 1:\n            return m\n        case _:\n"
                        "            return None\n",
    "fstrings": "W = 8\nNAME = f'{W!r:>4}_{W:04d}_{W:{W}}'\nMSG = f'{[1, 2]}'\n",
    "lambdas_async": "F = lambda *a, **k: (a, k)\nasync def agen():\n    async with F as g:\n        await g\n",
    "odd_constants": "J = ','.join([1, 2])\nK = {}.join(['a'])\nP = '%s %s' % ('a',)\nQ = 'a' * (10 ** 12)\n"
                     "R = 10 ** 400 * 10 ** 400\nS = '{:>999999999}'.format(1)\nT = {[1]: 2} if False else 0\n",
    # constants whose reading would build gigabytes (a width of millions, a replace that multiplies a 16 MB string)
    "huge_constants": "BIG = 'a' * 16000000\nMORE = BIG.replace('a', 'aaaa')\nW = '%99999999d' % 1\n"
                      "V = '{:{}}'.format(1, 99999999)\nU = f'{1:>99999999}'\n",
    "long_concatenation": "SRC2 = " + " + ".join(f'"// line {i}\\n"' for i in range(900)) + "\n",
    "relative_imports_metaclass": "from . import sibling\nclass Meta(type):\n    pass\nclass Q(metaclass=Meta):\n"
                                  "    pass\n",
    "odd_loops": "class C:\n    def forward(self):\n        for a, (b, c) in zip(self.x, self.y):\n            a(b)\n"
                 "        for (i, j) in enumerate(self.z):\n            pass\n        for k in self.w.items():\n"
                 "            k()\n",
}
HONEST_TAIL = "\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu(x)\n"


@pytest.mark.parametrize("name", sorted(ODD_PYTHON))
def test_unusual_valid_python_never_crashes_the_scan(name):
    code = HEAD + ODD_PYTHON[name] + HONEST_TAIL
    rep = scan(code)  # before: TypeError (unhashable list as a dict key), ast.dump(None) for `**`...
    assert rep.findings == [], [str(f) for f in rep.findings]
    assert rep.extensions[0].resolved and rep.extensions[0].args["functions"] == ["relu"]
    assert check_candidate_shape(code, "cpu") == []


def test_constants_the_scan_reads_are_read_exactly_or_not_at_all():
    code = HEAD.replace('cpp_sources=CPP', 'cpp_sources=SRC') + HONEST_TAIL
    table = "_TUNED = {(1, 131072, 64): (8, 64, 512)}\nBLOCK = 256\n"
    src = table + 'SRC = f"// {BLOCK:05d} {BLOCK!r} {BLOCK:x}\\n" + "-" * 3 + "\\n".join([str(BLOCK), CPP])\n'
    rep = scan(code.replace("ext = load_inline", src + "ext = load_inline"))
    assert rep.extensions[0].args["cpp_sources"] == f"// {256:05d} {256!r} {256:x}\n---256\n" + \
        "torch::Tensor relu(torch::Tensor x);"
    # a tuple read as a list would print differently: such an f-string is left to the child, not guessed
    rep = scan(code.replace("ext = load_inline", 'SRC = f"{(1, 2)}"\next = load_inline'))
    assert not rep.extensions[0].resolved and rep.extensions[0].args["functions"] == ["relu"]


def test_cheats_next_to_unusual_python_are_still_caught():
    odd = ODD_PYTHON["tuple_keys"] + ODD_PYTHON["dict_unpacking"]
    assert cheats.C01 in codes(HEAD + odd + "\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
                                            "        return torch.matmul(x, x)\n")
    assert cheats.C11 in codes(HEAD + odd + "\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
                                            "        return getattr(torch, CFG['k'] if 'k' in CFG else 'relu')(x)\n")


def test_an_internal_failure_of_the_scan_is_a_static_scan_error(monkeypatch):
    def broken(tree):
        raise KeyError("internal")

    monkeypatch.setattr(static_program, "init_only_nodes", broken)
    with pytest.raises(StaticScanError) as e:
        scan(HEAD + HONEST_TAIL)
    # named where it was raised: the innermost frame in the front's own modules
    assert "KeyError" in str(e.value) and "static_program.py" in str(e.value) and "in __init__" in str(e.value)
    assert not issubclass(StaticScanError, (KeyError, SyntaxError))  # callers catch it by its own name


def test_extract_never_raises_on_what_the_parser_refuses():
    assert any("does not parse" in p for p in check_candidate_shape("x = 1\0\n", "cpu"))
    deep = "S = " + " + ".join(['"a"'] * 5000) + "\n" + HONEST_TAIL
    assert any("does not parse" in p for p in check_candidate_shape(deep, "cpu"))


# ---------------------------------------------------------------------------- 3. launch routes

KERNEL = r'''
#include <torch/extension.h>
#include <cuda.h>
#include <cuda_runtime.h>
__global__ void __launch_bounds__(256) relu_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''
LAUNCHES = {
    "cudaLaunchKernel": '''torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x); int n = x.numel();
    const float* a = x.data_ptr<float>(); float* b = y.data_ptr<float>();
    void* args[] = {(void*)&a, (void*)&b, (void*)&n};
    cudaLaunchKernel((const void*)relu_kernel, dim3((n + 255) / 256), dim3(256), args, 0, 0);
    return y;
}''',
    "cudaLaunchKernelEx_cluster": '''torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x); int n = x.numel();
    cudaLaunchConfig_t cfg = {}; cfg.gridDim = dim3((n + 255) / 256); cfg.blockDim = dim3(256);
    cudaLaunchAttribute attr[1]; attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 2; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr; cfg.numAttrs = 1;
    cudaLaunchKernelEx(&cfg, relu_kernel, (const float*)x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}''',
    "cudaLaunchCooperativeKernel": '''torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x); int n = x.numel();
    const float* a = x.data_ptr<float>(); float* b = y.data_ptr<float>();
    void* args[] = {(void*)&a, (void*)&b, (void*)&n};
    cudaLaunchCooperativeKernel((void*)relu_kernel, dim3(80), dim3(256), args, 0, 0);
    return y;
}''',
    "cuLaunchKernel_after_cudaGetFuncBySymbol": '''torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x); int n = x.numel();
    const float* a = x.data_ptr<float>(); float* b = y.data_ptr<float>();
    void* args[] = {(void*)&a, (void*)&b, (void*)&n};
    cudaFunction_t fn; cudaGetFuncBySymbol(&fn, (const void*)relu_kernel);
    cuLaunchKernel((CUfunction)fn, (n + 255) / 256, 1, 1, 256, 1, 1, 0, 0, args, nullptr);
    return y;
}''',
    "cuLaunchKernelEx_after_cuModuleGetFunction": '''static const char* kName = "relu_kernel";
torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x); int n = x.numel();
    CUmodule mod; CUfunction fn; cuModuleLoad(&mod, "k.cubin"); cuModuleGetFunction(&fn, mod, kName);
    CUlaunchConfig cfg = {}; cfg.gridDimX = (n + 255) / 256; cfg.blockDimX = 256;
    const float* a = x.data_ptr<float>(); float* b = y.data_ptr<float>();
    void* args[] = {(void*)&a, (void*)&b, (void*)&n};
    cuLaunchKernelEx(&cfg, fn, args, nullptr);
    return y;
}''',
    "cudaGraphLaunch": '''torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x); int n = x.numel();
    const float* a = x.data_ptr<float>(); float* b = y.data_ptr<float>();
    void* args[] = {(void*)&a, (void*)&b, (void*)&n};
    cudaGraph_t g; cudaGraphExec_t ge; cudaGraphNode_t node; cudaGraphCreate(&g, 0);
    cudaKernelNodeParams p = {}; p.func = (void*)relu_kernel; p.gridDim = dim3((n + 255) / 256);
    p.blockDim = dim3(256); p.kernelParams = args;
    cudaGraphAddKernelNode(&node, g, nullptr, 0, &p); cudaGraphInstantiate(&ge, g, 0); cudaGraphLaunch(ge, 0);
    return y;
}''',
}


def _cuda_candidate(host: str, kernel: str = KERNEL) -> str:
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""{kernel}{host}
"""
ext = load_inline(name="relu_launch", cpp_sources="torch::Tensor relu(torch::Tensor x);", cuda_sources=CUDA_SRC,
                  functions=["relu"], extra_cuda_cflags=["-O3"], extra_ldflags=["-lcuda"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x.contiguous())
'''


@pytest.mark.parametrize("route", sorted(LAUNCHES))
def test_kernels_launched_through_the_runtime_or_driver_api_are_launched(route):
    code = _cuda_candidate(LAUNCHES[route])
    assert "<<<" not in code
    assert check_candidate_shape(code, "cuda") == []  # before: "defined but never launched with <<<...>>>" (C02)
    assert findings(code) == []


def test_a_kernel_referenced_by_no_launch_route_is_still_never_launched():
    # the answer comes from ATen; the kernel's name shows only in its declaration and in comments
    host = ('torch::Tensor relu(torch::Tensor x) {\n    // relu_kernel<<<blocks, 256>>>(...) was too slow\n'
            '    printf("see http://x/relu_kernel");  /* cudaLaunchKernel((void*)relu_kernel, ...) */\n'
            '    return at::relu(x);\n}')
    probs = check_candidate_shape(_cuda_candidate(host), "cuda")
    assert any("never launched" in p and "relu_kernel" in p for p in probs), probs  # engine.py: C02
    # one kernel launched, another never referenced: something is launched, the runtime judges the rest
    two = KERNEL + "__global__ void unused_kernel(float* y) { }\n"
    assert check_candidate_shape(_cuda_candidate(LAUNCHES["cudaLaunchKernel"], two), "cuda") == []


def test_a_never_launched_kernel_beside_vendor_or_torch_compute_names_both_rows():
    """KernelBench's technoabsurdist-l1-p2 on the H100: a kernel defined, never launched, the answer from cuBLAS.
    The verdict said C02 alone; the extract stop now runs the static stage too, so it names C01 as well."""
    from verifier.screen import front as _front

    def front(host):
        return _front("", _cuda_candidate(host), "cuda", "t", "c").verdict

    cublas = ('torch::Tensor relu(torch::Tensor x) {\n    auto y = torch::empty_like(x); float one = 1.f;\n'
              '    cublasSgemm(at::cuda::getCurrentCUDABlasHandle(), CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one,\n'
              '                x.data_ptr<float>(), 1, x.data_ptr<float>(), 1, &one, y.data_ptr<float>(), 1);\n'
              '    return y;\n}')
    v = front(cublas)
    assert v.status == "cheat" and v.cheats == sorted([cheats.C01, cheats.C02]), (v.status, v.cheats)
    assert "never launched" in v.feedback and "cuBLAS" in v.feedback
    v = front('torch::Tensor relu(torch::Tensor x) {\n    return at::relu(x);\n}')
    assert v.status == "cheat" and v.cheats == [cheats.C02]  # ATen in C++: the runtime's question, as before
    # the answer from torch in forward: strict's C01 beside C02
    torch_fwd = _cuda_candidate('torch::Tensor relu(torch::Tensor x) {\n    return x;\n}').replace(
        "return ext.relu(x.contiguous())", "return torch.relu(ext.relu(x))")
    v = _front("", torch_fwd, "cuda", "t", "c").verdict
    assert v.cheats == sorted([cheats.C01, cheats.C02]), v.cheats
    # an honest launch stays clean of both
    v = front(LAUNCHES["cudaLaunchKernel"])
    assert not v.status and not v.cheats and v.stage_reached == "compile"


# ---------------------------------------------------------------------------- 4. vendor includes and link flags

def _spec_findings(code: str) -> list[str]:
    """What the static stage's source scan says (engine.py: scan_sources over each load_inline spec)."""
    out = []
    for spec in scan(code).extensions:
        srcs = [s for k in ("cpp_sources", "cuda_sources") for s in (
            spec.args.get(k) if isinstance(spec.args.get(k), list) else [spec.args.get(k) or ""])]
        out += scan_sources(srcs, spec.args.get("extra_ldflags"))
    return out


TILED = KERNEL + '''
torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x); int n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}'''
UNUSED_VENDOR = TILED.replace("#include <cuda.h>", '''#include <cuda.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <cudnn.h>
#define CUBLAS_CHECK(call) do { cublasStatus_t s_ = (call); \\
    TORCH_CHECK(s_ == CUBLAS_STATUS_SUCCESS, "cublas"); } while (0)
// we tried cublasSgemm here; our kernel is faster''')


def test_unused_vendor_includes_and_link_flags_are_not_vendor_compute():
    code = _cuda_candidate("", UNUSED_VENDOR).replace('"-lcuda"', '"-lcublas", "-lcublasLt", "-lcudnn"')
    assert _spec_findings(code) == []  # before: C01 for the include (and again for each -l flag)
    assert check_candidate_shape(code, "cuda") == [] and findings(code) == []


@pytest.mark.parametrize("call", [
    "cublasHandle_t h; cublasCreate(&h);",
    'CUBLAS_CHECK(cublasSgemm(at::cuda::getCurrentCUDABlasHandle(), CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, nullptr, '
    'nullptr, 1, nullptr, 1, nullptr, nullptr, 1));',
    "cublasLtHandle_t lt; cublasLtCreate(&lt); cublasLtMatmul(lt, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);",
    "cudnnHandle_t d; cudnnCreate(&d); cudnnConvolutionForward(d, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);",
    'printf("http://docs"); cublasSgemm_v2(0);',  # a '//' inside a string starts no comment
], ids=["cublas_handle", "cublas_sgemm_in_check_macro", "cublaslt_matmul", "cudnn_conv", "after_url_string"])
def test_a_vendor_call_behind_the_include_is_vendor_compute(call):
    src = UNUSED_VENDOR.replace("return y;\n}", call + "\n    return y;\n}")
    assert any("cuBLAS" in f or "cuDNN" in f for f in scan_sources([src])), code_text(src)


def test_vendor_library_linked_statically_is_a_finding():
    for flags in (["-l:libcublas_static.a"], ["-Wl,-Bstatic", "-lcublas"], ["/usr/local/cuda/lib64/libcudnn_static.a"]):
        assert any("statically" in f for f in scan_sources([TILED], flags)), flags


@pytest.fixture(scope="module")
def stub_libs(tmp_path_factory):
    """A stand-in libcublas.so (this machine has no CUDA libraries) and three extensions linked against it."""
    cxx = shutil.which("g++") or shutil.which("c++")
    assert cxx, "a C++ compiler is part of the verifier's requirements"
    d = tmp_path_factory.mktemp("stub_cublas")
    (d / "cublas.c").write_text('int cublasSgemm_v2(int x) { return x; }\nint cublasCreate_v2(void* h) { return 0; }\n')
    subprocess.run([cxx, "-x", "c", "-shared", "-fPIC", "-o", str(d / "libcublas.so"), str(d / "cublas.c")], check=True)
    sources = {
        # includes nothing it calls: its kernel is its own
        "unused": "int own_kernel(int x) { return x > 0 ? x : 0; }\n",
        # the vendor name built by the preprocessor: the source never spells it
        "pasted": '#define J(a, b) a##b\nextern "C" int J(cubl, asSgemm_v2)(int);\n'
                  'int relu(int x) { return J(cubl, asSgemm_v2)(x); }\n',
    }
    out = {}
    for name, src in sources.items():
        (d / f"{name}.cpp").write_text(src)
        for as_needed in (True, False):
            so = d / f"{name}_{as_needed}.so"
            cmd = [cxx, "-shared", "-fPIC", "-o", str(so), str(d / f"{name}.cpp"), f"-L{d}"] + \
                (["-Wl,--as-needed"] if as_needed else ["-Wl,--no-as-needed"]) + ["-lcublas"]
            subprocess.run(cmd, check=True)
            out[(name, as_needed)] = (src, so)
    return out


def test_unused_link_flag_imports_nothing_and_a_pasted_vendor_name_shows_in_the_binary(stub_libs):
    for as_needed in (True, False):
        src, so = stub_libs[("unused", as_needed)]
        assert scan_sources([src], ["-lcublas"]) == [] and scan_library(so) == []
        src, so = stub_libs[("pasted", as_needed)]
        assert "cuBLAS" not in str(scan_sources([src.replace("#define J(a, b) a##b", "")], ["-lcublas"]))
        # the source never spells it, but its macros expanded do (vendor.expanded) ...
        assert any("cuBLAS" in f and "cublasSgemm_v2" in f for f in scan_sources([src], ["-lcublas"]))
        assert any("cuBLAS" in f and "cublasSgemm_v2" in f for f in scan_library(so))  # ... and so does the linker


# ---------------------------------------------------------------------------- 6. own modules, unused classes

OWN_BLOCKS = HEAD + '''

class ReLUBlock(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return ext.relu(x)


class ModelNew(nn.Module):
    def __init__(self, depth=3):
        super().__init__()
        self.body = nn.Sequential(*[ReLUBlock(i) for i in range(depth)], nn.Identity())
        self.extra = nn.ModuleList([ReLUBlock(0), ReLUBlock(1)])
        heads = []
        for i in range(2):
            heads.append(ReLUBlock(i))
        self.heads = nn.ModuleDict({"a": heads[0], "b": heads[1]})

    def forward(self, x):
        x = self.body(x)
        for blk in self.extra:
            x = blk(x)
        return self.heads["a"](self.extra[0](x))
'''
# the reference kept verbatim next to the answer, a test helper and a __main__ check: none of it runs
UNUSED_CLASSES = HEAD + '''

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.fc(x)) @ x.t()


def reference_relu(x):
    return Model()(x).relu()


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)


if __name__ == "__main__":
    x = torch.randn(4, 16)
    print(torch.allclose(ModelNew()(x), reference_relu(x)))
'''


def test_a_container_of_own_modules_and_unused_classes_are_honest():
    for code in (OWN_BLOCKS, UNUSED_CLASSES):
        assert check_candidate_shape(code, "cpu") == []
        assert findings(code) == []  # before: C01 "calls nn submodule `self.body`"; C01/C04 from the unused Model


@pytest.mark.parametrize("code", [
    OWN_BLOCKS.replace("nn.Identity()", "nn.Linear(16, 16)"),  # a torch layer among the members
    OWN_BLOCKS.replace("heads.append(ReLUBlock(i))", "heads.append(nn.ReLU())"),  # through a list it appends to
    OWN_BLOCKS.replace("[ReLUBlock(0), ReLUBlock(1)]", "[nn.Linear(16, 16), ReLUBlock(1)]"),  # iterated, called
    # a helper class that IS used: its torch compute is forward's
    UNUSED_CLASSES.replace("        return ext.relu(x)", "        return reference_relu(x)"),
    UNUSED_CLASSES.replace("class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu(x)",
                           "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                           "        self.m = Model()\n\n    def forward(self, x):\n        return ext.relu(self.m(x))"),
    # a decorator may register a class where forward finds it: it counts as used
    UNUSED_CLASSES.replace("def reference_relu(x):", "@torch.no_grad()\ndef reference_relu(x):"),
], ids=["linear_in_sequential", "relu_appended_to_list", "linear_in_iterated_modulelist", "used_helper_function",
        "used_reference_copy", "decorated_helper"])
def test_torch_layers_in_containers_and_used_helpers_are_still_torch_compute(code):
    assert check_candidate_shape(code, "cpu") == []
    assert cheats.C01 in codes(code), findings(code)


# ---------------------------------------------------------------------------- 7. out of scope, said clearly

TRITON = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
'''
FROM_FILES = '''import os
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load

ext = load(name="relu_ext", sources=[os.path.join(os.path.dirname(__file__), "relu.cu")], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
'''


@pytest.mark.parametrize("code,start", [
    (TRITON, "Triton kernels are not supported by this verifier: "),
    (FROM_FILES, "CUDA/C++ built from files with torch.utils.cpp_extension.load(...) is not supported by this "
                 "verifier: "),
], ids=["triton", "cpp_extension_load"])
def test_programs_outside_the_verifier_get_an_extract_error_that_says_so(code, start):
    for backend in ("cuda", "cpu"):
        probs = check_candidate_shape(code, backend)
        assert len(probs) == 1 and probs[0].startswith(start) and "load_inline" in probs[0], probs
        assert "never launched" not in probs[0]  # not read as C02 by engine.py
    # a CUDA answer that also imports triton is judged as usual
    assert check_candidate_shape(_cuda_candidate(TILED).replace("import torch\n", "import torch\nimport triton\n", 1),
                                 "cuda") == []


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


# ---------------------------------------------------------------------------- 8. dlopen imported by CCCL headers

CUB_SOURCE = "#include <torch/extension.h>\n#include <cub/cub.cuh>\n__global__ void k(float* x) { x[0] = 1; }\n"


@pytest.fixture(scope="module")
def dlopen_so(tmp_path_factory):
    """An extension that imports dlopen / dlsym, as every module including CUDA 13's CCCL headers does (an honest
    CUB reduction, technoabsurdist-l1-p95, got C01 for it on the H100)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    d = tmp_path_factory.mktemp("dlopen")
    (d / "m.cpp").write_text('#include <dlfcn.h>\nextern "C" void* load(const char* n) { return dlsym(dlopen(n, 2), "f"); }\n')
    so = d / "m.so"
    subprocess.run([cxx, "-shared", "-fPIC", "-o", str(so), str(d / "m.cpp"), "-ldl"], check=True)
    return so


def test_dynamic_loading_imported_by_cccl_headers_is_not_vendor_compute(dlopen_so):
    assert scan_library(dlopen_so, [CUB_SOURCE]) == []
    assert scan_library(dlopen_so, ["#include <thrust/sort.h>\n"]) == []


def test_dynamic_loading_without_cccl_or_written_beside_it_is_still_flagged(dlopen_so):
    """The cheat look-alikes: the same import with no CCCL include (or one only in a comment) is a finding, and a
    candidate that includes CUB to cover a dlopen it writes is caught by its source."""
    assert any("dynamic loading" in f for f in scan_library(dlopen_so))
    assert any("dynamic loading" in f for f in scan_library(dlopen_so, ["// #include <cub/cub.cuh>\nint f();\n"]))
    written = CUB_SOURCE + 'void* h = dlopen("libcublas.so", 2);\n'
    assert any("dynamic loading" in f for f in scan_sources([written]))
