"""What identifies a candidate's build, read the same way by the verifier and by the execution child: the canonical
``load_inline`` spec, its build key and extension name, and the old-torch spellings read as today's (the child
builds what the verifier did not, and must name it alike). Imports: torch (its version is in the key) and
verifier.common.backends.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

import torch

from verifier.common.backends import own_kernel_renames, rename_kernels

SPEC_KEYS = ("cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags", "extra_ldflags",
             "extra_include_paths", "with_cuda")


def _as_list(v) -> list:
    if v is None:
        return []
    return [v] if isinstance(v, str) else list(v)


def _flags(v) -> list:
    """A flag list without its blank entries: torch joins the flags with spaces into the ninja file, so ``""``
    (KernelBench's template: ``extra_cflags=[""], extra_ldflags=[""]``) adds nothing to any command; without them
    the spec, its key and its shared objects are those of the same code with no flags."""
    return [f for f in _as_list(v) if not (isinstance(f, str) and not f.strip())]


def canonical_spec(args: dict) -> dict:
    """load_inline keyword arguments reduced to what determines the built binary (no name)."""
    fns = args.get("functions")
    spec = {
        "cpp_sources": _as_list(args.get("cpp_sources")),
        "cuda_sources": _as_list(args.get("cuda_sources")),
        "functions": fns if isinstance(fns, dict) else _as_list(fns),
        "extra_cflags": _flags(args.get("extra_cflags")),
        "extra_cuda_cflags": _flags(args.get("extra_cuda_cflags")),
        "extra_ldflags": _flags(args.get("extra_ldflags")),
        "extra_include_paths": _as_list(args.get("extra_include_paths")),
        "with_cuda": args.get("with_cuda"),
    }
    return spec


def spec_key(args: dict) -> str:
    """The build key: a hash of the canonical spec, the torch version and the CUDA arch list."""

    blob = json.dumps({"spec": canonical_spec(args), "torch": torch.__version__,
                       "arch": os.environ.get("TORCH_CUDA_ARCH_LIST", "")}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def extension_name(key: str) -> str:
    return f"km_{key}"


# torch API that kernels written for an older torch use and today's headers no longer accept, read the way that
# torch read it. Only where the meaning is fixed: the first argument of an AT_DISPATCH macro is the scalar type
# to dispatch on, and ``x.type()`` (DeprecatedTypeProperties) there meant ``x.scalar_type()`` until torch
# dropped that conversion ("no suitable conversion function from DeprecatedTypeProperties to c10::ScalarType").
# Published model answers use it (19 of the 484 test-bed solutions; the honest ones failed to compile).
# (the ``_AND`` macros take their extra scalar types first: ``AT_DISPATCH_FLOATING_TYPES_AND(at::kHalf, x.type(), ..``)
_DISPATCH_TYPE = re.compile(r"(\bAT_DISPATCH_[A-Z0-9_]+\s*\(\s*(?:[\w:]+\s*,\s*){0,4})"
                            r"([A-Za-z_][\w.\[\]]*(?:->[A-Za-z_]\w*)*)\.type\(\)(\s*,)")


def compat_source(src: str) -> tuple[str, int]:
    """(the source with the old-torch spellings above read as today's, how many were rewritten); the line
    count never changes, so compiler messages keep their line numbers."""
    return _DISPATCH_TYPE.subn(r"\1\2.scalar_type()\3", src)


def compat_spec(spec: dict) -> tuple[dict, int]:
    """The spec with :func:`compat_source` applied to its C++ and CUDA sources, and the rewrite count; the
    candidate's kernels renamed to the names only its own module carries (backends.own_kernel_renames)."""
    out, n = dict(spec), 0
    for k in ("cpp_sources", "cuda_sources"):
        done = [compat_source(src) for src in spec.get(k) or []]
        out[k] = [d[0] for d in done]
        n += sum(d[1] for d in done)
    renames = own_kernel_renames(spec)
    out["cuda_sources"] = [rename_kernels(src, renames) for src in out["cuda_sources"]]
    return out, n
