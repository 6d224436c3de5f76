"""The "slim" build of a CUDA source that uses torch: the headers it needs instead of all of ATen.

load_inline puts ``#include <torch/types.h>`` (all of ATen.h, autograd, torch/library.h) in front of every CUDA
source, and KernelBench-style sources add ``torch/extension.h`` (pybind11 and Python on top). nvcc parses all of it
twice (device and host passes), which is most of a candidate's build time. A typical source uses a handful of
things from torch: ``torch::Tensor`` and its methods, two or three factory functions (``torch::empty_like``),
``TORCH_CHECK``, maybe ``AT_DISPATCH_*`` and the current stream.

``slim_source`` returns the source with its heavy torch includes (``torch/types.h``, ``torch/extension.h``)
replaced by a prelude of exactly the headers it uses (``ATen/core/Tensor.h``, the tensor operators of
``ATen/TensorOperators.h``, one ``ATen/ops/<op>.h`` per function called, ``ATen/Dispatch.h`` when a dispatch macro is
used) and the ``torch::`` names torch/types.h would have given it, or None when the source uses anything outside the
short list this module knows (then the caller builds it as before; ``slim_refusal`` says which name).

Contract: a build variant never changes the candidate's code, its flags, the binding file, or what the code means.
A source whose meaning the slim prelude would change is not slim (None); it is built by the next variant. The one
place where the two preludes differ is the factory functions that torch's headers declare in ``torch::`` itself
(torch/csrc/autograd/generated/variable_factories.h) rather than take from ``at::``: under the slim prelude
``torch::zeros`` is ``at::zeros``. That is exact only where every overload of the ``torch::`` function exists in
``at::`` with the same parameters and defaults (``_exact_torch_factories`` reads both headers of the installed
torch). ``torch::tensor`` is not one: ``torch::tensor(sum / n, opts)`` is 0-dim with torch's headers and a
1-element 1-D tensor as ``at::tensor(T value, opts)``; ``torch::from_blob`` adds what ``at::from_blob`` lacks.
And it is exact only where nothing asks for ``requires_grad`` (the ``torch::`` wrappers make the result require
grad, the ``at::`` functions reject the option). A source that still fails to compile slim (a method that lives in
another header) is built by the next variant (verifier/build/pool.py), so the worst a wrong guess costs is one failed
attempt; on the model-written test bed (H200, bench/results/slim_testbed_cpu.md) that was 3 of 394 slim attempts
before the tensor operators were included, none of 418 after (the index methods and a spec of two CUDA sources, 2 of
351 further units, were fixed next).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import torch.utils.cpp_extension as ce

from verifier.build.boxed import SLIM_HEAD_FILES
from verifier.front.vendor import strip_cxx

# includes the slim build replaces (everything a typical source gets from them is in the prelude)
_HEAVY = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](?:torch/(?:extension|all|python|types)|ATen/ATen)\.h[>"]'
                    r'[ \t]*$', re.M)
_QUALIFIED = re.compile(r"\b(torch|at|c10)::((?:\w+::)*\w+)(\s*[(<{]?)")
_MACROS = re.compile(r"\b(?:TORCH|AT|C10|PYBIND11)_[A-Z0-9_]+")
_OWN_INCLUDES = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]((?:ATen|c10|torch)/[^>"]+)[>"]', re.M)

# names usable without a call (types, dtype constants, enums) that ATen/core/Tensor.h declares
_TYPES = {"Tensor", "TensorOptions", "ScalarType", "Dtype", "Device", "DeviceType", "IntArrayRef", "Scalar",
          "Half", "BFloat16", "Layout", "MemoryFormat", "optional", "nullopt", "TensorBase", "ArrayRef",
          "kFloat", "kHalf", "kBFloat16", "kDouble", "kInt", "kLong", "kByte", "kChar", "kShort", "kBool",
          "kFloat32", "kFloat16", "kFloat64", "kInt32", "kInt64", "kInt16", "kInt8", "kUInt8", "kF32", "kF16",
          "kCUDA", "kCPU", "kStrided", "elementSize", "toString", "isFloatingType", "TensorList"}
# the TensorOptions helpers (c10/core/TensorOptions.h, which ATen/core/Tensor.h includes): ``torch::dtype(kFloat)``
# is ``c10::dtype`` under both preludes (torch:: declares none of them itself)
_OPTION_HELPERS = {"dtype", "device", "layout", "memory_format", "device_index"}
# macros of the headers the prelude includes: c10/util/Exception.h (AT_ERROR, AT_ASSERT*), ATen/Dispatch.h,
# c10/cuda/CUDAException.h (included when the source names C10_CUDA_), c10/macros
_MACRO_OK = re.compile(r"(?:TORCH_CHECK\w*|TORCH_INTERNAL_ASSERT\w*|TORCH_WARN\w*|AT_DISPATCH_\w+|AT_PRIVATE_\w+|"
                       r"AT_ERROR|AT_ASSERT|AT_ASSERTM|"
                       r"C10_CUDA_KERNEL_LAUNCH_CHECK|C10_CUDA_CHECK|C10_UNUSED|C10_HOST_DEVICE|C10_DEVICE)$")
# the tensor operators (``a + b``, ``x * 2.0f``, ``t == u``: ATen/TensorOperators.h, which all of ATen includes): their
# header as its per-operator form (which includes ATen/ops/empty_like.h instead of every function of ATen/Functions.h);
# the same inline definitions, so a source using them means what it means with torch's headers


def _per_operator(header: str) -> str:
    """``#include <header>`` in its per-operator form (the one torch's own build compiles it in)."""
    return (f"#ifndef AT_PER_OPERATOR_HEADERS\n#define AT_PER_OPERATOR_HEADERS\n#include <{header}>\n"
            f"#undef AT_PER_OPERATOR_HEADERS\n#else\n#include <{header}>\n#endif")


_OPERATORS = _per_operator("ATen/TensorOperators.h")
# the lines every slim prelude starts with (the rest is per source): a split build's host unit compiles them from a
# precompiled header of their own (SLIM_HEADER, verifier/build/pch.py; ~3.6 of a host unit's ~4.6 s, measured on the
# CPU machine), the unit then starting ``#include <km_slim_head.h>`` in their place
SLIM_HEAD = "\n".join(["#include <cuda.h>", "#include <cuda_runtime.h>", "#include <ATen/core/Tensor.h>", _OPERATORS]) + "\n"
# the heads' file names are boxed.py's (torch-free: the object cache, verifier/build/objcache.py, looks for them on a
# shim's compile command)
_CPU_HEAD_FILE, _HEAD_FILE = SLIM_HEAD_FILES
SLIM_HEADER = (_HEAD_FILE, SLIM_HEAD)
# the same head for a C++-only extension's host unit (the "split_cpp" variant, verifier/build/variants.py): no CUDA
# header, which a C++-only build of torch's never includes (nor has on its include path)
SLIM_CPU_HEAD = "\n".join(["#include <ATen/core/Tensor.h>", _OPERATORS]) + "\n"
SLIM_CPU_HEADER = (_CPU_HEAD_FILE, SLIM_CPU_HEAD)
SLIM_HEADERS = {SLIM_HEAD: SLIM_HEADER, SLIM_CPU_HEAD: SLIM_CPU_HEADER}  # a host unit's head -> its header file


def slim_cpp_source(src: str) -> str | None:
    """A C++-only source under the slim prelude without its CUDA headers (:func:`slim_source`'s analysis, the head
    :data:`SLIM_CPU_HEAD`), or None where slim refuses it or its prelude names anything of CUDA."""
    out = slim_source(src)
    if out is None or not out.startswith(SLIM_HEAD) or "cuda" in out[len(SLIM_HEAD):out.index("// ---- the candidate")]:
        return None
    return SLIM_CPU_HEAD + out[len(SLIM_HEAD):]
# ``t.index({i, Slice()})`` / ``t.index_put_({...}, v)``: Tensor's indexing methods, declared in TensorBody.h, are defined
# in ATen/TensorIndexing.h (all of ATen includes it), with the names of ``at::indexing`` (torch::indexing)
_INDEXING_CALL = re.compile(r"(?:\.|->)\s*index(?:_put_)?\s*\(")
_INDEXING_NAMES = {"Slice", "None", "Ellipsis", "TensorIndex"}

# guarded: load_inline joins a spec's CUDA sources into one file, each with its own prelude
_TORCH_ALIASES = """#ifndef KERNELMILL_SLIM_TORCH_ALIASES
#define KERNELMILL_SLIM_TORCH_ALIASES
namespace torch {
using namespace at;
using Dtype = at::ScalarType;
constexpr auto kFloat32 = at::kFloat;
constexpr auto kFloat16 = at::kHalf;
constexpr auto kFloat64 = at::kDouble;
constexpr auto kInt8 = at::kChar;
constexpr auto kInt16 = at::kShort;
constexpr auto kInt32 = at::kInt;
constexpr auto kInt64 = at::kLong;
constexpr auto kUInt8 = at::kByte;
constexpr auto kF32 = kFloat32;
constexpr auto kF16 = kFloat16;
}  // namespace torch
#endif
"""


@lru_cache(maxsize=1)
def _ops_dir() -> Path | None:
    for inc in ce.include_paths():
        d = Path(inc) / "ATen" / "ops"
        if d.is_dir():
            return d
    return None


_SIGNATURE_HEAD = re.compile(r"^[ \t]*(?:inline\s+)?(?:TORCH_API\s+)?(?:at::)?Tensor\s+(\w+)\s*\(", re.M)


def _signatures(text: str) -> dict[str, set[str]]:
    """name -> the parameter lists (defaults included, spacing and ``at::`` / ``c10::`` / ``::std::``
    qualification dropped) of the functions returning a Tensor by value declared in a header's text."""
    out: dict[str, set[str]] = {}
    for m in _SIGNATURE_HEAD.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        params = re.sub(r"(?<![\w:])(?:::)?(?:at|c10|std)::", "", text[m.end():i - 1])
        params = re.sub(r"\s+", "", params)
        out.setdefault(m.group(1), set()).add(params)
    return out


@lru_cache(maxsize=4)
def _torch_factories(ops_dir: Path | None) -> tuple[frozenset[str], frozenset[str]]:
    """(every function torch's headers declare in ``torch::`` itself (variable_factories.h), those of them that the
    slim prelude's ``torch::`` -> ``at::`` maps exactly: each ``torch::`` overload has an ``at::`` twin with the
    same parameters and defaults in its ATen/ops header). Nothing is exact when the headers cannot be read."""
    header = None
    for base in ([ops_dir.parent.parent] if ops_dir is not None else []) + \
            [Path(inc) for inc in ce.include_paths()]:
        candidate = base / "torch" / "csrc" / "autograd" / "generated" / "variable_factories.h"
        if candidate.is_file():
            header = candidate
            break
    if header is None or ops_dir is None:
        return frozenset(_FACTORIES_KNOWN), frozenset()
    theirs = _signatures(header.read_text(errors="replace"))
    exact = set()
    for name, sigs in theirs.items():
        op = ops_dir / f"{name[:-len('_symint')] if name.endswith('_symint') else name}.h"
        if op.is_file() and sigs <= _signatures(op.read_text(errors="replace")).get(name, set()):
            exact.add(name)
    return frozenset(set(theirs) | _FACTORIES_KNOWN), frozenset(exact - {"tensor", "from_blob"})


# declared in torch:: by torch's headers whatever this torch's headers say (so a missing header never makes them
# look like plain at:: names)
_FACTORIES_KNOWN = {"tensor", "from_blob", "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones",
                    "ones_like", "full", "full_like", "arange", "range", "linspace", "logspace", "eye", "rand",
                    "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "normal",
                    "scalar_tensor", "from_file"}


def slim_source(src: str, ops_dir: Path | None = None) -> str | None:
    """The source with a minimal torch prelude instead of its heavy includes, or None if not eligible (a name
    outside the known subset, or one whose meaning the slim prelude would change: module docstring)."""
    return _slim(src, ops_dir)[0]


def slim_refusal(src: str, ops_dir: Path | None = None) -> str:
    """Why :func:`slim_source` returns None for ``src`` (the first name or construct it does not take), or ""."""
    return _slim(src, ops_dir)[1]


def _slim(src: str, ops_dir: Path | None) -> tuple[str | None, str]:
    ops_dir = ops_dir or _ops_dir()
    if ops_dir is None:
        return None, "no ATen/ops headers"
    factories, exact = _torch_factories(ops_dir)
    code = strip_cxx(src)
    own = _OWN_INCLUDES.findall(_HEAVY.sub("", src))
    cuda_header = any(h.startswith(("ATen/cuda/", "c10/cuda/")) for h in own)
    ops: set[str] = set()
    indexing = _INDEXING_CALL.search(code) is not None
    # options that ask for requires_grad (``opts.requires_grad(true)``, ``torch::requires_grad()``); reading a
    # tensor's flag (``t.requires_grad()``) means the same under both preludes
    asks_grad = re.search(r"(?<![.>])\brequires_grad\s*\(|(?:\.|->)\s*requires_grad\s*\(\s*[^)\s]", code) is not None
    for ns, path, after in _QUALIFIED.findall(code):
        parts = path.split("::")
        if ns == "torch" and parts[0] in factories and (parts[0] not in exact or asks_grad):
            return None, f"{ns}::{path}"  # torch::tensor, torch::from_blob, requires_grad: at:: means otherwise
        if parts[0] == "cuda":
            if not cuda_header:  # the source brings the CUDA context header itself, or it is not slim
                return None, f"{ns}::{path} without its header"
            continue
        if len(parts) > 1 and parts[0] in _TYPES:  # at::ScalarType::Float, at::MemoryFormat::Contiguous
            continue
        if len(parts) == 2 and parts[0] == "indexing" and parts[1] in _INDEXING_NAMES:
            indexing = True
            continue
        if len(parts) != 1:
            return None, f"{ns}::{path}"
        name = parts[0]
        if name in _TYPES:
            continue
        if after.strip() == "(" and (ops_dir / f"{name}.h").is_file():
            ops.add(name)
            continue
        if after.strip() == "(" and name in _OPTION_HELPERS:
            continue
        return None, f"{ns}::{path}{after.strip()}"
    for macro in _MACROS.findall(code):
        if not _MACRO_OK.match(macro):
            return None, macro
    if re.search(r"\bpy::|pybind11|\busing\s+namespace\s+(?:torch|at|c10)\b", code):
        return None, "py:: / pybind11 / using namespace"  # unqualified torch names cannot be mapped to headers
    prelude = [SLIM_HEAD.rstrip("\n")]
    if indexing:
        prelude.append(_per_operator("ATen/TensorIndexing.h"))
    if "AT_DISPATCH_" in src:
        prelude.append("#include <ATen/Dispatch.h>")
    if "C10_CUDA_" in src:
        prelude.append("#include <c10/cuda/CUDAException.h>")
    prelude += [f"#include <ATen/ops/{name}.h>" for name in sorted(ops)]
    return "\n".join(prelude) + "\n" + _TORCH_ALIASES + "// ---- the candidate's source\n" + _HEAVY.sub("", src), ""
