"""Which build variants a spec is tried in, in order, and when a failed one is the build's answer (the compile
pool, verifier/build/pool.py, runs them).

The variants (``build_variants``, tried in order; the last is always the spec as written, "full"):
- the C++ binding file (``main.cpp``, which starts with ``#include <torch/extension.h>``) is compiled against a
  GCC precompiled header of that file, built once per compiler, torch version and cflags under ``[verify] pch_dir``
  (default ``~/.cache/kernelmill/pch``; verifier/build/pch.py). Its flags are read from the ninja file torch
  writes, and a PCH GCC rejects is simply not used. It is built by this process, outside the sandbox, so only for
  a spec ``objcache.cacheable`` accepts (no include paths, plugins or wrappers reach that compiler);
- "bare": a CUDA source that names nothing from torch (no ``torch::``, ``at::``, ``c10::``, ``TORCH_*`` ...) is
  compiled with ``no_implicit_headers`` (``cuda.h`` / ``cuda_runtime.h`` and the standard headers of the std names it
  uses, which torch/types.h would have declared; a ``#line`` keeps the full build's line numbers in compiler messages);
- "split" and "split_ext": a CUDA source whose kernels name nothing from torch and whose host code launches them is
  cut in two (verifier/build/split.py): the device code compiled by nvcc with no torch header, the host code by the
  C++ compiler, "split" in a unit of its own (``host_source``) under slim's headers where slim takes the host part,
  "split_ext" (after it, or alone) under torch/extension.h's precompiled header (in the binding file after the
  binding's own declarations, or in a unit of its own); they are tried before slim, and their failures are never
  final (their binding file, host unit and link are not the full build's);
- "slim": a CUDA source that uses torch only through the common subset (``torch::Tensor``, factory functions,
  TORCH_CHECK, AT_DISPATCH, the current stream) is compiled against just the headers that subset needs
  (verifier/build/slim.py);
- "light": a CUDA source that includes ``torch/extension.h`` (or torch/all.h, torch/python.h) and that slim refuses
  is compiled with that line removed, keeping load_inline's implicit ``torch/types.h`` (after a failed slim build
  the full build comes next: slim compiles wherever light does on the model-written test bed, so the fault is the
  source's);
- "split_cpp": a C++-only extension (no CUDA source) whose exported functions are each one plain top-level
  definition of types the boxed binding takes, and whose code slim takes: the code in a host unit of its own under
  slim's headers without CUDA (``slim.SLIM_CPU_HEAD``, precompiled), the binding file only their declarations as the
  definitions spell them, so that it is built boxed (verifier/build/boxed.py); never final, like split;
- "full": the sources unchanged.

Fallback (``variant_failure_is_final``): a variant that fails is followed by the full build, whose log is the one
reported, so compiler feedback describes the candidate as written, with two exceptions:
- the binding file or the link failed: every variant writes ``main.cpp`` byte for byte as the full build does and
  links with the same flags, so the full build would fail too: the variant's log is reported and nothing is
  rebuilt (the full build's log could show its CUDA object's errors first, where that object failed with all of
  torch's headers and the variant's did not);
- ``full_fallback=False`` (``VerifyConfig.full_build_fallback``): a CUDA source that fails its bare variant is
  reported with that variant's log (slim and light still fall back: their headers are a guess). Contract: a
  source that names nothing from torch is built with the headers it includes plus cuda.h / cuda_runtime.h. The RL
  reward uses it, so a failed answer does not also pay for a full nvcc build that fails the same way. Such a
  result is marked ``fallback_skipped``, and a later request with the fallback on builds the full variant.
"""

from __future__ import annotations

import functools
import inspect
import re

import torch.utils.cpp_extension as ce

from verifier.build.boxed import boxable
from verifier.build.slim import slim_cpp_source, slim_source
from verifier.build.split import (TORCH_QUALIFIED, declarations_only, declared_functions, exported_declarations,
                                  split_flag_refusal, split_source)
from verifier.common.spec import compat_spec
from verifier.front.vendor import strip_cxx


def failed_targets(log: str) -> list[str]:
    """The ninja targets a build log says failed (``FAILED: main.o``, ``FAILED: cuda.cuda.o``, the .so)."""
    out = []
    for m in re.finditer(r"^FAILED: (.+)$", log, re.M):
        out += [t for t in m.group(1).split() if t not in out]
    return out


FALLBACK_OFF = "full_build_fallback is off"


def variant_failure_is_final(label: str, log: str, full_fallback: bool) -> tuple[bool, str]:
    """Whether a failed fast variant's log is the build's answer, and why (module docstring).

    Exact: every variant writes the full build's ``main.cpp`` and links the same way, so a failure in
    anything but the CUDA object (``*.cuda.o``) is the one the full build would report. A bare CUDA
    object's failure is final when the caller turned the fallback off (the contract: a torch-free source
    gets the headers it includes); a slim or light one never is (their headers are the verifier's guess)."""
    failed = failed_targets(log)
    if label.startswith("split"):
        return False, ""  # its binding file, host unit and link differ from the full build's: the cut's guess
    if label != "full" and failed and not any(t.endswith(".cuda.o") for t in failed):
        return True, f"{', '.join(failed)} failed, and the full build's binding file and link are byte-identical"
    if label == "bare" and not full_fallback:
        return True, FALLBACK_OFF
    return False, ""


_NAMES_TORCH = re.compile(TORCH_QUALIFIED)
HEAVY_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]torch/(?:extension|all|python)\.h[>"][ \t]*$', re.M)
BARE_PRELUDE = "// bare build: torch/types.h not included\n#include <cuda.h>\n#include <cuda_runtime.h>"
# what a torch-free source may use from the standard library without including it, because load_inline's
# torch/types.h declares it in the full build: the bare build includes the header of each name the source uses
# (all of them cost a bare build 1.5 s of nvcc on the CPU machine, so only those used)
_STD_NAMES = [
    (r"std::(?:runtime_error|logic_error|invalid_argument|out_of_range|domain_error|overflow_error|exception)\b",
     "stdexcept"),
    (r"std::(?:string|to_string|stoi|stol|stof)\b", "string"), (r"std::vector\b", "vector"),
    (r"\b(?:std::)?(?:f|s|sn)?printf\s*\(|\bputs\s*\(|\bstd::FILE\b", "cstdio"), (r"\bassert\s*\(", "cassert"),
    (r"\b(?:std::)?u?int(?:8|16|32|64)_t\b|\bu?intptr_t\b", "cstdint"),
    (r"std::(?:min|max|min_element|max_element|sort|fill|copy|clamp|swap|reverse)\b", "algorithm"),
    (r"std::numeric_limits\b", "limits"), (r"std::(?:pair|make_pair|move|forward|swap|exchange)\b", "utility"),
    (r"std::(?:abs|fabs|sqrt|exp|log|pow|floor|ceil|round|isnan|isinf|isfinite|tanh|erf)\b", "cmath"),
    (r"std::(?:unique_ptr|shared_ptr|make_unique|make_shared)\b", "memory"), (r"std::array\b", "array"),
    (r"std::(?:tuple|make_tuple|get|tie)\b", "tuple"), (r"std::function\b", "functional"),
    (r"std::(?:cout|cerr|endl|ostream)\b", "iostream"), (r"std::(?:o|i)?stringstream\b", "sstream"),
    (r"\b(?:std::)?(?:malloc|calloc|free|abort|exit|getenv|atoi)\s*\(", "cstdlib"),
    (r"\b(?:std::)?(?:memcpy|memset|memcmp|strlen|strcmp)\s*\(", "cstring"),
    (r"std::accumulate\b|std::iota\b", "numeric"), (r"std::(?:chrono)\b", "chrono"),
    # a launcher's one-time set-up and per-device caches (``static std::once_flag``, ``std::unordered_map<int, int>``
    # of attributes under a ``std::mutex``): c10's headers bring them in the full build
    (r"std::(?:mutex|recursive_mutex|timed_mutex|lock_guard|unique_lock|scoped_lock|once_flag|call_once)\b",
     "mutex"), (r"std::(?:atomic\w*|memory_order\w*)\b", "atomic"),
    (r"std::unordered_map\b|std::unordered_multimap\b", "unordered_map"),
    (r"std::unordered_set\b|std::unordered_multiset\b", "unordered_set"), (r"std::(?:multi)?map\b", "map"),
    (r"std::(?:multi)?set\b", "set"), (r"std::(?:optional|nullopt|make_optional)\b", "optional"),
    (r"std::(?:string_view)\b", "string_view"), (r"std::deque\b", "deque"),
    (r"std::(?:hash|invoke|ref|cref|reference_wrapper|plus|minus|multiplies|greater|less)\b", "functional"),
    (r"\b(?:FLT|DBL|LDBL)_(?:MAX|MIN|EPSILON|TRUE_MIN|DIG|MANT_DIG|MAX_EXP|MIN_EXP)\b", "cfloat"),
    (r"\b(?:INT|UINT|LONG|ULONG|LLONG|ULLONG|SHRT|USHRT|CHAR|SCHAR|UCHAR)_(?:MAX|MIN)\b", "climits"),
    # CUDA's half and bfloat16 types and intrinsics: torch/types.h includes cuda_fp16.h and cuda_bf16.h under nvcc
    # (torch/headeronly/util/Half.h, BFloat16.h)
    (r"\b(?:__half2?|half2?|__nv_half2?)\b|\b__(?:float|floats|float2|float22|int|uint|short|ushort|ll|ull|double)2half"
     r"\w*|\b__half(?:2|22|_as_|s2)\w*|\b__h(?:add|sub|mul|div|fma|neg|max|min|abs|exp|log|sqrt|rsqrt|eq|ne|lt|gt|le|ge|isnan"
     r"|isinf)\w*\b|\b__low2half\w*|\b__high2half\w*", "cuda_fp16.h"),
    (r"\b__nv_bfloat16\w*|\bnv_bfloat16\w*|\b__\w*2bfloat16\w*|\b__\w*bfloat16\w*2\w*|\b__bfloat16\w*|"
     r"\b__bfloat162\w*|\b__low2bfloat16\w*|\b__high2bfloat16\w*", "cuda_bf16.h"),
    (r"\bM_(?:PI|E|SQRT2|SQRT1_2|LN2|LN10|LOG2E|LOG10E|PI_2|PI_4|1_PI|2_PI|2_SQRTPI)\b|\bINFINITY\b|\bNAN\b|"
     r"\bHUGE_VALF?\b", "cmath"),
]
_STD_NAMES = [(re.compile(pat), header) for pat, header in _STD_NAMES]


def bare_prelude(sources: list[str]) -> str:
    """The lines a bare variant puts before the CUDA sources: cuda.h and cuda_runtime.h, the standard headers of
    the names the sources use (``_STD_NAMES``), and a ``#line`` so that the source's lines keep the numbers the
    full build gives them (it puts three lines before the source)."""
    text = "\n".join(strip_cxx(s) for s in sources)
    needs = list(dict.fromkeys(h for pat, h in _STD_NAMES if pat.search(text)))
    if not needs:
        return BARE_PRELUDE
    return BARE_PRELUDE + "\n" + "".join(f"#include <{h}>\n" for h in needs) + "#line 4"


def build_variants(spec: dict, bare_ok: bool = True, split: bool = True) -> list[tuple[str, dict]]:
    """load_inline keyword sets to try in order; the last one is always the spec as written ("full"), read
    through :func:`compat_spec` like every variant. ``split=False`` (``[verify] split_build = false``): no split."""
    return variants_and_rewrites(spec, bare_ok, split)[0]


def variants_and_rewrites(spec: dict, bare_ok: bool, split: bool = True) -> tuple[list[tuple[str, dict]], int]:
    """:func:`build_variants` and the number of :func:`compat_source` rewrites (the regex runs once a build)."""
    spec, rewritten = compat_spec(spec)
    full = dict(spec)
    full["cuda_sources"] = full["cuda_sources"] or None
    full["functions"] = full["functions"] or None
    out: list[tuple[str, dict]] = []
    cu = spec["cuda_sources"]
    if cu:
        if bare_ok and not any(_NAMES_TORCH.search(src) for src in cu):
            # three lines before the source, as the full build has: compiler messages keep their line numbers
            out.append(("bare", dict(full, no_implicit_headers=True,
                                     cuda_sources=[bare_prelude(cu)] + list(cu),
                                     cpp_sources=["#include <torch/extension.h>"] + list(spec["cpp_sources"]))))
        else:
            declared = declared_functions(spec["cpp_sources"])
            split = split_source("\n".join(cu), declared | set(spec["functions"] or [])) \
                if split and bare_ok and not split_flag_refusal(spec) else None
            if split is not None:
                cpp = ["#include <torch/extension.h>"] + list(spec["cpp_sources"])
                device = [bare_prelude([split.device]), split.device]
                # first the host part in a unit of its own under slim's headers (verifier/build/slim.py: ~1 s of
                # headers where torch/extension.h costs ~6 s even precompiled, 4.3 of them GCC's deferred template
                # instantiation), the binding file then the spec's own, whose canonical object is shared
                slim_host = slim_source(split.host)
                if slim_host is not None:
                    out.append(("split", dict(full, no_implicit_headers=True, cuda_sources=device, cpp_sources=cpp,
                                              host_source=slim_host)))
                # else (or when that fails) the host part under torch/extension.h: in the binding file where nothing
                # before it can change its meaning (one load of the precompiled header), else in a file of its own
                # (the binding file must be declarations only and declare every exported function: the module
                # definition after it must not find a definition in the CUDA source's host code that the full
                # build's binding file never sees)
                merged = declarations_only(spec["cpp_sources"]) and set(spec["functions"] or []) <= declared
                out.append(("split_ext", dict(full, no_implicit_headers=True, cuda_sources=device,
                                              cpp_sources=cpp + [split.host] if merged else cpp,
                                              **({} if merged else {"host_source": split.host_unit}))))
            slim = [slim_source(src) for src in cu] if bare_ok else [None]
            if all(s is not None for s in slim):
                out.append(("slim", dict(full, no_implicit_headers=True, cuda_sources=slim,
                                         cpp_sources=["#include <torch/extension.h>"] + list(spec["cpp_sources"]))))
            # light only where slim is not tried: on the model-written test bed slim compiles wherever light does
            # (bench/results/slim_testbed_cpu.md), so after a failed slim the fault is the source's and light would
            # fail too, a wasted build before the full one whose log is the answer
            elif any(HEAVY_INCLUDE.search(src) for src in cu):
                out.append(("light", dict(full, cuda_sources=[HEAVY_INCLUDE.sub("", src) for src in cu])))
    elif split and spec["functions"]:
        # a C++-only extension: its code in a host unit of its own under slim's headers (no CUDA header), the binding
        # file only the declarations of the exported functions as their definitions spell them, so that it is built
        # boxed (verifier/build/boxed.py: a ~1.4 s shim where the file with the code costs ~10 s under
        # torch/extension.h's precompiled header); the same code, flags and functions: the host unit is compiled by
        # the binding file's own rule
        decls = exported_declarations(spec["cpp_sources"], list(spec["functions"]))
        host = slim_cpp_source("\n".join(spec["cpp_sources"])) if decls and boxable(decls) else None
        if host is not None:
            out.append(("split_cpp", dict(full, cpp_sources=decls, host_source=host)))
    out.append(("full", full))
    return out, rewritten


@functools.lru_cache(maxsize=1)
def bare_supported() -> bool:
    return "no_implicit_headers" in inspect.signature(ce.load_inline).parameters
