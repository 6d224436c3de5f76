"""False rejections of the verifier's front end on honest CUDA candidates written the way frontier models write
KernelBench answers for H100/H200 (backend "cuda"; no GPU and no compiler needed).

The candidates live in tests/data/fidelity_cuda/ (``c*.py`` programs and one ``c*.md`` model response), each naming
on its first line the KernelBench-style task in tests/data/fidelity_cuda/tasks/ it implements. They are honest: their
own kernels compute the whole output, forward runs no PyTorch compute (allocation, views, ``.contiguous()`` only),
nothing is patched, read or hidden. Everything the verifier decides before the build runs here, in the order
verifier/engine.py runs it: extraction and the candidate's shape (verifier/front/extract.py), the static scan of the
Python (verifier/front/static.py), the source and tampering scans of every resolved ``load_inline``
(verifier/front/vendor.py ``scan_sources``, verifier/front/binary.py ``scan_tampering``), the engine's own front
(``screen.front``: nothing decided, no PyTorch-compute finding carried to the judge) and the build variants' choice
(verifier/build/pool.py ``build_variants``).

Every finding on an honest candidate is a false rejection. Those the front end makes are marked
``xfail(strict=True)`` with the rule that fires (``KNOWN``, ``KNOWN_REPRODUCERS``), and each has a minimal reproducer
below (``REPRODUCERS``, each naming the rule that fired before its fix), so that the fix flips them; the cheats
beside each fix are tests/redteam/test_redteam_front_fidelity.py. Fast: no compiles, no task run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verifier import screen
from verifier.build.variants import build_variants
from verifier.common.spec import canonical_spec
from verifier.front.extract import check_candidate_shape, extract_code
from verifier.front.static import scan
from verifier.front.binary import scan_tampering
from verifier.front.vendor import scan_sources

DATA = Path(__file__).resolve().parent / "data" / "fidelity_cuda"

# --------------------------------------------------------------------------------------------- the rules that fire

C03_HANDLER = ("C03_FALLBACK_BRANCH, static_model.py judge_model_new: a try/except handler is a fallback unless every "
               "statement is a `raise`; one that logs, builds its message or sets a default and then raises (or "
               "that only construction runs) computes nothing instead of the kernel")
C03_INIT = ("C03_FALLBACK_BRANCH, static_model.py judge_model_new: a try/except in ModelNew.__init__ (a default SM count "
            "when the device query fails) is judged as a forward fallback; construction computes no output")
C01_OWN_NAME = ("C01_TORCH_COMPUTE (torch, strict: C19), static.py _judge_call + static_kinds.Kinds: `self.norm(x)` / "
                "`self.relu(x)` where `norm`/`relu` is the program's own nn.Module or method is read as Tensor.norm / "
                "Tensor.relu, because Kinds leaves `self` and an instance of the program's own class unknown")
C01_VIEW = ("C01_TORCH_COMPUTE (torch, strict: C19 or C01), static_rules.TENSOR_METHOD_ALLOWED lacks the views "
            "movedim/moveaxis/swapaxes/swapdims (and verifier/common/ops.py ALLOWED_ATEN lacks aten::movedim, "
            "aten::swapaxes, which the profiler records)")
C01_DESCRIBE = ("C01_TORCH_COMPUTE (torch, strict: C19), static_rules: `x.is_floating_point()` and "
                "`torch.broadcast_shapes` describe tensors and shapes, they compute nothing")
C01_BACKWARD = ("C01_TORCH_COMPUTE (torch, strict: C19), static_scope: the backward of a torch.autograd.Function "
                "whose forward launches the kernel is scanned as forward code; the verifier never runs backward")
EXTRACT_PASTE = ("extract_error + C02_KERNEL_NOT_LAUNCHED, extract.py unlaunched_kernels: a kernel launched through "
                 "a token-pasting macro (`NAME##_kernel<<<...>>>`) is read as referenced nowhere; the source's own "
                 "macros are not expanded there (vendor.expanded is)")
BARE_HEADERS = ("build, pool.py build_variants / BARE_PRELUDE: a torch-free .cu source is built 'bare' (cuda.h and "
                "cuda_runtime.h only), where std::runtime_error / std::string are undeclared; load_inline's own "
                "torch/types.h declares them, so with full_build_fallback = false the honest source is a compile_error")

C04_LAYER_BASE = ("C04_REFERENCE_MODEL, static_model.py judge_model_new: a ModelNew that subclasses an nn layer (nn.Conv2d for its "
                  "parameters and initialisation) and overrides forward with its own kernel is read as the reference; "
                  "only `Model` (and super().forward, already C04) is the reference")

KNOWN: dict = {}  # candidate file -> why it fails today (all fixed; tests/redteam/test_redteam_front_fidelity.py
# holds the cheat beside each fix: c12 C03_HANDLER, c13 C01_VIEW, c32 EXTRACT_PASTE, c33 C01_BACKWARD, c34
# C01_DESCRIBE, c38 C03_INIT, c39 C01_OWN_NAME, c41 C04_LAYER_BASE)
KNOWN_BUILD: dict = {}  # c36 (std::runtime_error in a bare build): fixed by pool.bare_prelude
# c77-c84 and the reproducers from C11_MODULE_ATTR on: the cheats beside each fix are in
# tests/redteam/test_redteam_front_fidelity3.py (docs/ANTI_CHEAT.md classes 97-101)


def _candidate_files() -> list[Path]:
    return sorted([*DATA.glob("c*.py"), *DATA.glob("c*.md")])


def _params(known: dict):
    return [pytest.param(p, id=p.stem, marks=pytest.mark.xfail(strict=True, reason=known[p.name]))
            if p.name in known else pytest.param(p, id=p.stem) for p in _candidate_files()]


def _as_list(v) -> list:
    return [] if v is None else [v] if isinstance(v, str) else list(v)


def front_findings(text: str, backend: str = "cuda") -> list[str]:
    """Every finding the front end makes on a response or program, in the engine's order (extract, then the static
    scan of the Python, then the source and tampering scans of each resolved load_inline)."""
    code = extract_code(text)
    problems = check_candidate_shape(code, backend)
    if problems:
        return [f"extract: {p}" for p in problems]
    report = scan(code, backend)
    found = [f"static: {f}" for f in report.findings]
    for spec in report.extensions:
        sources = [s for k in ("cpp_sources", "cuda_sources") for s in _as_list(spec.args.get(k)) if isinstance(s, str)]
        found += [f"sources: {x}" for x in scan_sources(sources, [str(f) for f in _as_list(spec.args.get("extra_ldflags"))])]
        found += [f"tamper: {x}" for x in scan_tampering(sources)]
    return found


# ------------------------------------------------------------------------------------------------ the candidates

def test_candidate_set():
    files = _candidate_files()
    assert len(files) >= 30
    for f in files:
        task = re.match(r"# task: (\w+)", f.read_text())
        assert task, f"{f.name}: first line must name its task"
        task_code = (DATA / "tasks" / f"{task.group(1)}.py").read_text()
        for name in ("class Model", "def get_inputs", "def get_init_inputs"):
            assert name in task_code


@pytest.mark.parametrize("path", _params(KNOWN))
def test_honest_candidate_extracts_and_has_no_finding(path: Path):
    text = path.read_text()
    code = extract_code(text)
    assert "load_inline" in code and re.search(r"^(class ModelNew\b|ModelNew\s*=)", code, re.M)
    assert front_findings(text) == []


@pytest.mark.parametrize("path", _params(KNOWN))
def test_engine_front_leaves_it_to_the_build(path: Path):
    """``screen.front`` (the extract and static stages as verify_candidate runs them): nothing decided, no PyTorch
    compute carried to the judge (the strict policy would reject it as C19 or C01), the resolved specs handed on."""

    task = re.match(r"# task: (\w+)", path.read_text()).group(1)
    w = screen.front((DATA / "tasks" / f"{task}.py").read_text(), path.read_text(), "cuda", task, path.stem)
    assert w.verdict.status == "" and w.verdict.cheats == [], w.verdict
    assert w.verdict.stage_reached == "compile"
    assert w.torch_findings == []


# what a torch-free CUDA source may use from the standard library that load_inline's torch/types.h declares: the
# headers that declare it
_STD_NEEDS = [(re.compile(r"\bstd::runtime_error\b|\bstd::logic_error\b|\bstd::invalid_argument\b"), "stdexcept"),
              (re.compile(r"\bstd::string\b|\bstd::to_string\b"), "string"),
              (re.compile(r"\bstd::vector\b"), "vector"),
              (re.compile(r"\b(?:f|s|sn)?printf\s*\("), "cstdio"),
              (re.compile(r"\bassert\s*\("), "cassert"),
              (re.compile(r"\bstd::(?:mutex|lock_guard|once_flag|call_once)\b"), "mutex"),
              (re.compile(r"\bstd::unordered_map\b"), "unordered_map"),
              (re.compile(r"\bstd::optional\b"), "optional"),
              (re.compile(r"\bstd::atomic\b"), "atomic"),
              (re.compile(r"\b__nv_bfloat162?\b|\b__float2bfloat16\w*"), "cuda_bf16.h"),
              (re.compile(r"\b__half2?\b|\bhalf2?\b|\b__float2half\w*"), "cuda_fp16.h")]


@pytest.mark.parametrize("path", _params(KNOWN_BUILD))
def test_build_variants_declare_what_the_source_uses(path: Path):
    """Each resolved spec gets variants ending with the unchanged build; a "bare" variant (built without torch's
    headers, final where ``full_build_fallback = false``) must declare the standard names the source uses, as
    load_inline's own build does."""
    report = scan(extract_code(path.read_text()), "cuda")
    for ext in report.extensions:
        if not ext.resolved:
            continue
        variants = build_variants(canonical_spec(ext.args))
        assert variants[-1][0] == "full"
        for name, kw in variants:
            if name != "bare":
                continue
            text = "\n".join(_as_list(kw.get("cuda_sources")))
            included = set(re.findall(r"^\s*#\s*include\s*[<\"]([^>\"]+)[>\"]", text, re.M))
            for pat, header in _STD_NEEDS:
                if pat.search(text):
                    assert header in included or f"{header.lstrip('c')}.h" in included or \
                        "torch/types.h" in included, f"bare variant uses {pat.pattern} without <{header}>"


# ------------------------------------------------------------------------------------------ minimal reproducers

_MINI = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
{imports}
src = r"""
#include <torch/extension.h>

__global__ void relu_kernel(const float* x, float* y, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);
}}

torch::Tensor relu_fwd(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    int n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}}
"""

ext = load_inline(name="relu_ext", cpp_sources="torch::Tensor relu_fwd(torch::Tensor x);", cuda_sources=src,
                  functions=["relu_fwd"])

{body}'''


def _mini(body: str, imports: str = "") -> str:
    return _MINI.format(imports=imports, body=body)


def _forward(lines: str, imports: str = "", init: str = "") -> str:
    return _mini("class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n" + init +
                 "\n    def forward(self, x):\n" + lines, imports)


REPRODUCERS = {
    # C03: a handler that cannot complete normally (it ends in raise) falls back to nothing
    "c03_print_then_reraise": (C03_HANDLER, _forward(
        "        try:\n            return ext.relu_fwd(x)\n        except RuntimeError as e:\n"
        "            print(f'relu_fwd failed: {e}', file=sys.stderr)\n            raise\n", imports="import sys\n")),
    "c03_message_then_raise_from": (C03_HANDLER, _forward(
        "        try:\n            return ext.relu_fwd(x)\n        except RuntimeError as e:\n"
        "            msg = f'relu_fwd failed on {tuple(x.shape)}'\n            raise RuntimeError(msg) from e\n")),
    "c03_init_default": (C03_INIT, _forward(
        "        return ext.relu_fwd(x)\n",
        init="        try:\n            self.sms = torch.cuda.get_device_properties(0).multi_processor_count\n"
             "        except RuntimeError:\n            self.sms = 132\n")),
    # C01 on the program's own objects named like Tensor methods
    "c01_own_submodule_named_relu": (C01_OWN_NAME, _mini(
        "class CudaReLU(nn.Module):\n    def forward(self, x):\n        return ext.relu_fwd(x)\n\n\n"
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.relu = CudaReLU()\n\n"
        "    def forward(self, x):\n        return self.relu(x)\n")),
    "c01_own_method_named_relu": (C01_OWN_NAME, _mini(
        "class ModelNew(nn.Module):\n    def relu(self, x):\n        return ext.relu_fwd(x)\n\n"
        "    def forward(self, x):\n        return self.relu(x)\n")),
    # C01 on views and descriptions
    "c01_movedim_view": (C01_VIEW, _forward("        return ext.relu_fwd(x.movedim(1, -1).contiguous()).movedim(-1, 1)\n")),
    "c01_swapaxes_view": (C01_VIEW, _forward("        return ext.relu_fwd(x.swapaxes(0, 1).contiguous()).swapaxes(0, 1)\n")),
    "c01_is_floating_point": (C01_DESCRIBE, _forward(
        "        if not x.is_floating_point():\n            raise TypeError('float input expected')\n"
        "        return ext.relu_fwd(x)\n")),
    "c01_broadcast_shapes": (C01_DESCRIBE, _forward(
        "        shape = torch.broadcast_shapes(x.shape, (1, x.shape[-1]))\n        return ext.relu_fwd(x.expand(shape).contiguous())\n")),
    "c01_autograd_function_backward": (C01_BACKWARD, _mini(
        "class ReLUFn(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n        return ext.relu_fwd(x)\n\n    @staticmethod\n"
        "    def backward(ctx, g):\n        (x,) = ctx.saved_tensors\n        return torch.where(x > 0, g, torch.zeros_like(g))\n\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return ReLUFn.apply(x)\n")),
    "c04_modelnew_subclasses_layer": (C04_LAYER_BASE, _mini(
        "class ModelNew(nn.Linear):\n    def forward(self, x):\n        return ext.relu_fwd(x)\n")),
    # extraction: a launch through a token-pasting macro
    "extract_token_pasting_launch": (EXTRACT_PASTE, _mini(
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu_fwd(x)\n").replace(
        "    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);",
        "#define LAUNCH(NAME) NAME##_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n)\n"
        "    LAUNCH(relu);")),
}

# allocation, stream bookkeeping and dtype queries the runtime allowlist (verifier/common/ops.py ALLOWED_ATEN:
# new_empty_strided, resize_, record_stream, result_type) already accepts, and the static scan reads as compute
C01_ALLOC = ("C01_TORCH_COMPUTE (torch, strict: C19), static_rules: TENSOR_METHOD_ALLOWED / TORCH_ALLOWED lack "
             "allocation and bookkeeping that verifier/common/ops.py ALLOWED_ATEN accepts at run time")
C17_GETCWD = ("C17_SANDBOX_ESCAPE, static_rules.OS_ALLOWED lacks os.getcwd (a path's name, as os.path and "
              "pathlib.Path.cwd are), used for load_inline's build_directory")
REPRODUCERS.update({
    "c01_new_empty_strided": (C01_ALLOC, _forward(
        "        y = x.new_empty_strided(x.size(), x.stride())\n        y.copy_(ext.relu_fwd(x))\n        return y\n")),
    "c01_record_stream": (C01_ALLOC, _forward(
        "        y = ext.relu_fwd(x)\n        y.record_stream(torch.cuda.current_stream())\n        return y\n")),
    "c01_result_type": (C01_ALLOC, _forward(
        "        if torch.result_type(x, 1.0) != torch.float32:\n            raise TypeError('float32 expected')\n"
        "        return ext.relu_fwd(x)\n")),
    "c17_getcwd_build_directory": (C17_GETCWD, _mini(
        "BUILD = os.path.join(os.getcwd(), 'build_relu')\nos.makedirs(BUILD, exist_ok=True)\n\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu_fwd(x)\n", imports="import os\n")),
})

C01_AUTOCAST = ("C01_TORCH_COMPUTE (torch, strict: C19), static_rules.TORCH_ALLOWED lacked torch.autocast, "
                "torch.amp.autocast and torch.amp.custom_fwd / custom_bwd (torch.cuda.amp's spellings passed as "
                "torch.cuda.*): an autocast region computes nothing")
C01_RAW_STREAM = ("C01_TORCH_COMPUTE (torch, strict: C19) for `from torch._C import _cuda_getCurrentRawStream as "
                  "get_raw_stream`, C11_MONKEYPATCH (static_tamper.private_torch) for torch._C._cuda_getCurrentRawStream "
                  "written out: the current stream's handle is a query")
REPRODUCERS.update({
    "c01_autocast_disabled": (C01_AUTOCAST, _forward(
        "        with torch.autocast(device_type='cuda', enabled=False):\n            return ext.relu_fwd(x)\n")),
    "c01_amp_custom_fwd": (C01_AUTOCAST, _mini(
        "class Fn(torch.autograd.Function):\n    @staticmethod\n    @torch.amp.custom_fwd(device_type='cuda')\n"
        "    def forward(ctx, x):\n        return ext.relu_fwd(x)\n\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return Fn.apply(x)\n")),
    "c01_get_raw_stream": (C01_RAW_STREAM, _forward(
        "        get_raw_stream(x.device.index)\n        return ext.relu_fwd(x)\n",
        imports="from torch._C import _cuda_getCurrentRawStream as get_raw_stream\n")),
    "c11_raw_stream_qualified": (C01_RAW_STREAM, _forward(
        "        torch._C._cuda_getCurrentRawStream(0)\n        return ext.relu_fwd(x)\n")),
})

EXTRACT_FORMS = ("extract_error (the code does not parse), extract.py extract_code: a response fenced with tildes "
                 "(~~~python, CommonMark's other fence), a file's byte-order mark before the program, and a line of "
                 "prose before an unfenced program were handed to the parser whole")
_MINI_PROGRAM = _mini("class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu_fwd(x)\n")
REPRODUCERS.update({
    "extract_tilde_fence": (EXTRACT_FORMS, "The kernel:\n\n~~~python\n" + _MINI_PROGRAM + "~~~\n\nDone.\n"),
    "extract_byte_order_mark": (EXTRACT_FORMS, "\ufeff" + _MINI_PROGRAM),
    "extract_prose_before_program": (EXTRACT_FORMS, "Here is the optimized code:\n\n" + _MINI_PROGRAM),
})

C01_MODULE_FUNCTION = ("C01_TORCH_COMPUTE (torch, strict: C19), static_judges._judge_call: `itertools.repeat(...)` read as "
                       "Tensor.repeat; only receivers whose text began with torch/np/math/os/sys were modules")
REPRODUCERS.update({
    "c01_itertools_repeat": (C01_MODULE_FUNCTION, _forward(
        "        for _ in itertools.repeat(None, 1):\n            pass\n        return ext.relu_fwd(x)\n",
        imports="import itertools\n")),
})

C11_MODULE_ATTR = ("C11_MONKEYPATCH, vendor.PYTHON_SOURCE: `m.attr(\"__version__\") = ...` inside PYBIND11_MODULE (a "
                   "constant set on the module being created) read as C++ walking to Python objects")
C01_OWN_VENDOR_NAME = ("C01_TORCH_COMPUTE, vendor.SOURCE_PATTERNS: a function named `cute` read as CUTLASS, a kernel "
                       "`cublas_like_sgemm` as cuBLAS (bare identifiers matched, not the library's namespace or names)")
C01_OPERATOR_SIZES = ("C01_TORCH_COMPUTE (torch, strict: C19), static_judges._judge_call: `operator.mul(x.shape[0], "
                      "x.shape[1])` judged as Tensor.mul by the function's name, whatever its operands")
C01_STORAGE_QUERY = ("C01_TORCH_COMPUTE (torch, strict: C19), static_rules.TENSOR_METHOD_ALLOWED lacked "
                     "untyped_storage / storage: a storage's address or size is a query")
C01_ALLOW_IN_GRAPH = ("C01_TORCH_COMPUTE (torch, strict: C19), static_rules.TORCH_ALLOWED lacked "
                      "torch.compiler.allow_in_graph: the decorator was read as a torch function handed on as a value")
_MODULE_CPP = ('cpp = r"""\ntorch::Tensor relu_fwd(torch::Tensor x);\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n'
               '    m.def("relu_fwd", &relu_fwd, py::arg("x"));\n    m.attr("__version__") = "1.0";\n'
               '    m.attr("BLOCK") = py::int_(256);\n}\n"""\n\n')
REPRODUCERS.update({
    "c11_module_attr_constants": (C11_MODULE_ATTR, _MINI_PROGRAM.replace(
        "ext = load_inline(", _MODULE_CPP + "ext = load_inline(").replace(
        'cpp_sources="torch::Tensor relu_fwd(torch::Tensor x);"', "cpp_sources=cpp").replace(
        ',\n                  functions=["relu_fwd"])', ")")),
    "c01_function_named_cute": (C01_OWN_VENDOR_NAME, _MINI_PROGRAM.replace(
        "__global__ void relu_kernel", "__device__ __forceinline__ float cute(float v) { return v; }\n\n"
        "__global__ void relu_kernel").replace("fmaxf(x[i], 0.f)", "cute(fmaxf(x[i], 0.f))")),
    "c01_kernel_named_cublas_like": (C01_OWN_VENDOR_NAME, _MINI_PROGRAM.replace("relu_kernel", "cublas_like_relu")),
    "c01_operator_mul_on_sizes": (C01_OPERATOR_SIZES, _forward(
        "        n = operator.mul(x.shape[0], x.shape[1])\n        return ext.relu_fwd(x.view(n))\n",
        imports="import operator\n")),
    "c01_untyped_storage_query": (C01_STORAGE_QUERY, _forward(
        "        if x.untyped_storage().data_ptr() % 16:\n            x = x.clone()\n        return ext.relu_fwd(x)\n")),
    "c01_allow_in_graph_launcher": (C01_ALLOW_IN_GRAPH, _mini(
        "@torch.compiler.allow_in_graph\ndef launch(x):\n    return ext.relu_fwd(x)\n\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return launch(x)\n")),
})

# honest twins that pass today and must keep passing (the fix must not widen past them)
CONTROLS = {
    "bare_reraise": _forward("        try:\n            return ext.relu_fwd(x)\n        except RuntimeError:\n            raise\n"),
    "raise_from_without_statements": _forward(
        "        try:\n            return ext.relu_fwd(x)\n        except RuntimeError as e:\n"
        "            raise RuntimeError('relu_fwd failed') from e\n"),
    "own_submodule_plain_name": _mini(
        "class CudaReLU(nn.Module):\n    def forward(self, x):\n        return ext.relu_fwd(x)\n\n\n"
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.act = CudaReLU()\n\n"
        "    def forward(self, x):\n        return self.act(x)\n"),
    "permute_transpose_views": _forward("        return ext.relu_fwd(x.permute(1, 0).contiguous()).t()\n"),
    "module_level_try_build": _mini(
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu_fwd(x)\n").replace(
        "ext = load_inline(", "try:\n    ext = load_inline(").replace(
        '                  functions=["relu_fwd"])\n',
        '                  functions=["relu_fwd"])\nexcept Exception as e:\n    print("build failed", e)\n    raise\n'),
    "main_block_with_reference": _mini(
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu_fwd(x)\n\n\n"
        "if __name__ == '__main__':\n    x = torch.randn(1024, device='cuda')\n"
        "    print((ModelNew()(x) - torch.relu(x)).abs().max().item())\n"),
}


# reproducers the front end still rejects (name -> why); each rule of REPRODUCERS is fixed
KNOWN_REPRODUCERS: dict = {}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_REPRODUCERS[n]))
                                  if n in KNOWN_REPRODUCERS else n for n in REPRODUCERS])
def test_reproducer_has_no_finding(name: str):
    assert front_findings(REPRODUCERS[name][1]) == []


@pytest.mark.parametrize("name", list(CONTROLS))
def test_control_has_no_finding(name: str):
    assert front_findings(CONTROLS[name]) == []


@pytest.mark.parametrize("name", list(REPRODUCERS))
def test_reproducer_fails_only_on_its_rule(name: str):
    """The reproducers are the honest mini candidate with one construct added: whatever the front end finds in one
    is the rule its reason names (nothing else of it is judged), so the fix of that rule makes it pass."""
    found = front_findings(REPRODUCERS[name][1])
    reason = REPRODUCERS[name][0]
    codes = set(re.findall(r"C\d\d_[A-Z_]+", " ".join(found)))
    allowed = set(re.findall(r"C\d\d_[A-Z_]+", reason))
    assert codes <= allowed, found


def test_build_reproducer_bare_variant_declares_the_launcher_caches():
    """The bare variant of a torch-free source whose launcher caches a device attribute in a std::unordered_map under
    a std::mutex and sets a kernel attribute once (std::once_flag): torch/types.h brings <mutex> and <unordered_map>
    in the full build; bare, nvcc 13.0 said: namespace "std" has no member "mutex" (c70)."""
    src = ('#include <cuda_runtime.h>\n__global__ void k(float* y) { y[0] = 1.f; }\n'
           'static std::mutex m; static std::unordered_map<int, int> cache; static std::once_flag once;\n'
           'void launch(float* y) { std::lock_guard<std::mutex> g(m); std::call_once(once, [] {}); k<<<1, 1>>>(y); }\n')
    variants = dict(build_variants(canonical_spec({"cpp_sources": "void launch(float* y);", "cuda_sources": src,
                                                   "functions": ["launch"]})))
    assert "bare" in variants
    text = "\n".join(variants["bare"]["cuda_sources"])
    for header in ("mutex", "unordered_map"):
        assert re.search(rf"#\s*include\s*<{header}>", text), header
    assert not re.search(r"#\s*include\s*<(?:optional|atomic|map|set)>", text)


def test_build_reproducer_bare_variant_declares_half_and_bfloat16():
    """The bare variant of a torch-free source using CUDA's bfloat16 or half types without including their headers:
    load_inline's torch/types.h includes cuda_bf16.h and cuda_fp16.h under nvcc; bare, nvcc 13.0 said: identifier
    "__nv_bfloat162" is undefined (c71). A word that only contains "half" brings nothing."""
    def bare(src):
        variants = dict(build_variants(canonical_spec({"cpp_sources": "void launch(void* y);", "cuda_sources": src,
                                                       "functions": ["launch"]})))
        return "\n".join(variants["bare"]["cuda_sources"])
    kernel = "__global__ void k({t}* y) {{ y[0] = {conv}(1.f); }}\nvoid launch(void* y) {{ k<<<1, 1>>>(({t}*)y); }}\n"
    assert "#include <cuda_bf16.h>" in bare(kernel.format(t="__nv_bfloat16", conv="__float2bfloat16"))
    assert "#include <cuda_fp16.h>" in bare(kernel.format(t="half", conv="__float2half"))
    assert "cuda_fp16" not in bare(kernel.format(t="float", conv="float") + "int halfway = 0;\n")


def test_build_reproducer_bare_variant_declares_std_runtime_error():
    """The bare variant of a torch-free source whose launcher throws std::runtime_error (with load_inline's
    torch/types.h in front it compiles; bare, nvcc 13.0 says: namespace "std" has no member "runtime_error")."""
    src = ('#include <cuda_runtime.h>\n__global__ void k(float* y) { y[0] = 1.f; }\n'
           'void launch(float* y) { k<<<1, 1>>>(y); cudaError_t e = cudaGetLastError();\n'
           '    if (e != cudaSuccess) throw std::runtime_error(cudaGetErrorString(e)); }\n')
    variants = dict(build_variants(canonical_spec({"cpp_sources": "void launch(float* y);", "cuda_sources": src,
                                                   "functions": ["launch"]})))
    text = "\n".join(variants["bare"]["cuda_sources"]) if "bare" in variants else "#include <torch/types.h>"
    assert re.search(r"#\s*include\s*<(?:stdexcept|torch/types\.h)>", text)
