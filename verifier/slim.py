"""The "slim" build of a CUDA source that uses torch: the headers it needs instead of all of ATen.

load_inline puts ``#include <torch/types.h>`` (all of ATen.h, autograd, torch/library.h) in front of every
CUDA source, and KernelBench-style sources add ``torch/extension.h`` (pybind11 and Python on top). nvcc
parses all of it twice (device and host passes), which is most of the ~60-90 s a candidate's build takes.
A typical source uses a handful of things from torch: ``torch::Tensor`` and its methods, two or three
factory functions (``torch::empty_like``), ``TORCH_CHECK``, maybe ``AT_DISPATCH_*`` and the current stream.

``slim_source`` returns the source with its heavy torch includes replaced by a prelude of exactly those
headers (``ATen/core/Tensor.h``, one ``ATen/ops/<op>.h`` per function called, ``ATen/Dispatch.h`` when a
dispatch macro is used) and the ``torch::`` names torch/types.h would have given it, or None when the
source uses anything outside the short list this module knows (then the caller builds it as before).

What it does not change: the candidate's code, its flags, the binding file. ``torch::empty_like`` resolves
to ``at::empty_like`` instead of the autograd-wrapping overload of the same name, which makes no difference
to a forward pass (the verifier runs it under no_grad, and the result is the same tensor). A source that
still fails to compile slim (a tensor operator such as ``x + y``, a method that lives in another header)
is built by the next variant, so the worst a wrong guess costs is one failed attempt.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import torch.utils.cpp_extension as ce

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
          "kCUDA", "kCPU", "kStrided", "elementSize", "toString", "isFloatingType"}
_MACRO_OK = re.compile(r"(?:TORCH_CHECK\w*|TORCH_INTERNAL_ASSERT\w*|TORCH_WARN\w*|AT_DISPATCH_\w+|AT_PRIVATE_\w+|"
                       r"C10_CUDA_KERNEL_LAUNCH_CHECK|C10_CUDA_CHECK|C10_UNUSED|C10_HOST_DEVICE|C10_DEVICE)$")

_TORCH_ALIASES = """namespace torch {
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
"""


@lru_cache(maxsize=1)
def _ops_dir() -> Path | None:
    for inc in ce.include_paths():
        d = Path(inc) / "ATen" / "ops"
        if d.is_dir():
            return d
    return None


def slim_source(src: str, ops_dir: Path | None = None) -> str | None:
    """The source with a minimal torch prelude instead of its heavy includes, or None if not eligible."""
    ops_dir = ops_dir or _ops_dir()
    if ops_dir is None:
        return None
    own = _OWN_INCLUDES.findall(_HEAVY.sub("", src))
    cuda_header = any(h.startswith(("ATen/cuda/", "c10/cuda/")) for h in own)
    ops: set[str] = set()
    for ns, path, after in _QUALIFIED.findall(src):
        parts = path.split("::")
        if parts[0] == "cuda":
            if not cuda_header:  # the source brings the CUDA context header itself, or it is not slim
                return None
            continue
        if len(parts) > 1 and parts[0] in _TYPES:  # at::ScalarType::Float, at::MemoryFormat::Contiguous
            continue
        if len(parts) != 1:
            return None
        name = parts[0]
        if name in _TYPES:
            continue
        if after.strip() == "(" and (ops_dir / f"{name}.h").is_file():
            ops.add(name)
            continue
        return None
    for macro in _MACROS.findall(src):
        if not _MACRO_OK.match(macro):
            return None
    if re.search(r"\bpy::|pybind11|\busing\s+namespace\s+(?:torch|at|c10)\b", src):
        return None  # unqualified names from torch cannot be mapped to their headers
    prelude = ["#include <cuda.h>", "#include <cuda_runtime.h>", "#include <ATen/core/Tensor.h>"]
    if "AT_DISPATCH_" in src:
        prelude.append("#include <ATen/Dispatch.h>")
    if "C10_CUDA_" in src:
        prelude.append("#include <c10/cuda/CUDAException.h>")
    prelude += [f"#include <ATen/ops/{name}.h>" for name in sorted(ops)]
    return "\n".join(prelude) + "\n" + _TORCH_ALIASES + "// ---- the candidate's source\n" + _HEAVY.sub("", src)
