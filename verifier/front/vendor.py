"""Vendor-library and ATen compute reached from a candidate's own C++/CUDA (cheat C01).

The runtime dispatch monitors see ATen ops that go through the dispatcher. They do not see a candidate
whose C++ calls cuBLAS, cuBLASLt, cuDNN, CUTLASS, oneDNN / MKL / BLAS, or ATen's internal kernels
(``at::native::``, ``at::cuda::blas::``) directly. Three independent checks catch that:

1. ``scan_sources``: the candidate's C++/CUDA source text: the library's identifiers in use (calls, handles,
   types, namespaces), not its includes (an unused ``#include <cublas_v2.h>`` computes nothing), and link flags
   that put a library's code inside the module (static linking); a dynamic ``-lcublas`` is judged by (2);
2. ``scan_library``: the dynamic symbols the built extension imports (an ELF's dynamic string table lists
   every function it links to by name, so a call the source hid behind macros still shows; a ``dlopen`` /
   ``dlsym`` pair that would fetch a library by a built-up string is flagged too);
3. at run time on cuda, the share of forward device time spent in kernels named in the candidate's sources
   (verifier/child/worker.py, judged in verifier/judge/verdict.py): a cuBLAS or cuDNN kernel shows by name.

Each finding names the library. Honest look-alikes that must pass: allocation and stream helpers
(``at::cuda::getCurrentCUDAStream``, ``torch::empty``), ``cub``/``thrust`` primitives are not flagged here
(header-only building blocks compiled into the candidate's own kernels), nor the dlopen / dlsym that CUDA 13's
CCCL headers import into any module that includes them.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import re
import shutil
import struct
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from verifier import cheats

# (library, pattern over source text)
# The patterns read the code a compiler would compile: comments, string literals, #include lines and macros that are
# defined but never expanded are removed first (``code_text``). An include alone computes nothing: a library is
# judged by its identifiers in use (calls, handles, types, namespaces); a name the preprocessor builds
# (``cu##blas##Sgemm``) never shows here and is caught by the built module's imported symbols (``scan_library``).
SOURCE_PATTERNS = [
    ("cuBLAS", re.compile(r"\bcublas\w*|getCurrentCUDABlas(Lt)?Handle|\bat::cuda::blas\b")),
    ("cuDNN", re.compile(r"\bcudnn\w*|\bat::native::cudnn")),
    # header-only: no imported symbol shows it, its namespace does (``cute::``, ``using namespace cute``, an alias);
    # on cuda its kernels are foreign by name in the time coverage
    ("CUTLASS", re.compile(r"\b(?:cutlass|cute)\b")),
    ("cuSPARSE/cuFFT/cuSOLVER", re.compile(r"\bcusparse\w+|\bcufft\w+|\bcusolver\w+")),
    ("BLAS/MKL/oneDNN", re.compile(r"\bcblas_\w+|\bmkl_\w+|\bdnnl(::|_)\w*|\bmkldnn\w*|\bsgemm_\s*\(|\bat::native::cpublas|"
                                   r"\bat::cpublas\b")),
    ("ATen internals", re.compile(r"\bat::native::\w+|\bat::redispatch::\w+|::redispatch\s*\(")),
    ("dynamic loading", re.compile(r"\bdlopen\s*\(|\bdlsym\s*\(")),
    # the loaded libraries' symbol tables walked by hand: any function of any library, found by a name that is
    # never imported (or only in a string)
    ("symbol tables", re.compile(r"\bdl_iterate_phdr\b|\bdladdr1?\b|\bdlinfo\b|\b_r_debug\b|\bstruct\s+link_map\b|"
                                 # or a mapped library's ELF image read in memory (from any function's address):
                                 # its headers, dynamic section and symbol tables by their types and tags
                                 r"\bElf(?:32|64)_\w+|\bElfW\s*\(|\bPT_DYNAMIC\b|\bDT_(?:SYMTAB|STRTAB|GNU_HASH|HASH)\b|"
                                 r"\bELFMAG\d?\b|\bSHT_DYNSYM\b")),
]
# C++ that blinds what watches forward (the dispatcher's observers, the Python dispatch key, the profiler,
# CUPTI) or changes global backend state: cheat C11 wherever it appears in the sources or the built binary
TAMPER_SOURCE = re.compile(
    r"\b(enableRecordFunction|RecordFunctionGuard|DisableRecordFunctionGuard|RecordFunctionTLS|"
    r"set_record_function_tls_|clearCallbacks|removeCallback|ExcludeDispatchKeyGuard|IncludeDispatchKeyGuard|"
    r"tls_set_dispatch_key_excluded|tls_set_dispatch_key_included|_force_tls_local_dispatch_key_set|"
    r"DisableTorchDispatch|PythonDispatcherTLS|PythonTorchFunctionTLS|DisablePythonDispatcher|"
    r"cupti\w*|cudaProfilerStop|cuProfilerStop|autograd::profiler|torch::profiler|"
    r"globalContext\s*\(\s*\)\s*\.\s*set\w+|PyRun_\w+|PyEval_EvalCode\w*|Py_CompileString\w*|"
    # observers of every op (they see, and can keep, the reference's outputs), the thread's dispatch keys and
    # records by hand, the allocators replaced, operators listed as they register
    r"addGlobalCallback|addThreadLocalCallback|RecordFunctionCallback|get_record_function_tls_|"
    r"raw_local_dispatch_key_set|SetCPUAllocator|SetAllocator|addRegistrationListener|OpRegistrationListener)\b|"
    # PyTorch's own operators overridden (a kernel registered for aten, prim or every operator)
    r"\bTORCH_LIBRARY_(?:IMPL|FRAGMENT)\s*\(\s*(?:aten|prim|_)\s*,")
# C++ that reaches Python objects (cheat C11, like TAMPER_SOURCE): the verifier's modules, torch's and numpy's Python
# entry points and the builtins are not a kernel's to walk to, and compute done there (``x.numpy().dot(...)``) is
# seen by no monitor. The binary's imports cannot say it: pybind11 is header-only and imports the C API for itself
# (every extension takes PyObject_GetAttrString, PyEval_GetBuiltins, PyDict_GetItemWithError and
# PyObject_CallFunctionObjArgs, one with a ``py::class_`` PyObject_Vectorcall and PyObject_GetAttr, which is also how
# pybind11 calls a Python object), so the source is read for every spelling of the routes in: any name of the C API
# written out (``PyObject_GetAttr``, ``PyObject_Call``, ``PyEval_GetBuiltins``, ``PyNumber_MatrixMultiply``), a type's
# slots (``Py_TYPE(o)->tp_call``); pybind11's attribute reads whatever the spelling (``o.attr(``, ``(&o)->attr(``,
# the member ``&py::object::attr``, its accessors), ``getattr(`` by any qualification (a using-declaration, an alias),
# modules imported (``py::module_::import``, an alias's ``M::import``, ``m.import``), globals, eval, exec and
# pybind11's internals. The bindings themselves (``PYBIND11_MODULE``, ``m.def``, ``py::class_``, ``py::arg``,
# ``py::init``) and torch's C++ API spell none of it; the test bed's 1,695 answers write none of it.
PYTHON_SOURCE = re.compile(
    r"\b_?Py[A-Z][A-Za-z]*_\w+|\b_Py[A-Z]\w+|\bPy_TYPE\b|\bob_type\b|"
    # a type object's slots by name (not any ``tp_`` name: ``tp_size`` is a tensor-parallel degree)
    r"\btp_(?:getattro?|setattro?|dict|call|vectorcall\w*|methods|members|getset|base|bases|mro|as_\w+|descr_get|"
    r"descr_set|new|init|alloc|dictoffset|iter|iternext|richcompare|repr|str|hash|subclasses)\b|"
    r"(?:\.|->|::)\s*(?:template\s+)?attr\b(?:\s*\()?|\battr\s*[(<]|"
    r"\b(?:str_attr_accessor|obj_attr_accessor|accessor_policies|str_attr|obj_attr|get_internals)\b|"
    r"\b(?:getattr|hasattr|setattr|delattr)\s*\(|(?:\.|->|::)\s*import\b(?:\s*\()?|"
    r"\b(?:py|pybind11)\s*::\s*(?:getattr|hasattr|globals|eval\w*|exec|module_?\s*::\s*import)\b(?:\s*\()?|"
    r"\b(?:__globals__|__builtins__|__import__|__dict__|__class__|__subclasses__)\b")
TAMPER_SYMBOL = re.compile(rb"^(cupti\w+|cudaProfilerStop|cuProfilerStop|_ZN2at\d*enableRecordFunction\w*|"
                           rb"_ZN2at\d*set_record_function_tls_\w*|_ZN2at\d*clearCallbacks\w*|"
                           rb"_ZN2at\d*removeCallback\w*|_ZN3c104impl\d*tls_set_dispatch_key_\w+|"
                           rb"_ZN3c104impl\d*_force_tls_local_dispatch_key_set\w*|_ZN2at7Context\d*set\w+|"
                           rb"_ZN2at\d+add(?:Global|ThreadLocal)Callback\w*|_ZN2at\d+get_record_function_tls_\w*|"
                           rb"_ZN3c104impl\d+raw_local_dispatch_key_set\w*|_ZN3c10\d+Set(?:CPU)?Allocator\w*|"
                           rb"_ZN3c1010Dispatcher\d+addRegistrationListener\w*)(@\w+)?$")


@cheats.check(cheats.C11, where="front")
def scan_tampering(sources: list[str], so_path: str | Path | None = None, built_from: list[str] | tuple = ()) -> list[str]:
    """Findings of C++ that switches off the runtime monitors, changes global backend state or reaches Python
    objects (C11), in the sources as written and with the candidate's own macros expanded (``expanded``), and in the
    symbols the built extension ``so_path`` imports (``built_from``: the sources it was built from, which say whether
    its dispatch-key TLS imports are those of ``c10::InferenceMode``'s inline guard: ``_inference_mode_only``)."""
    found = []
    for src in sources:
        m = TAMPER_SOURCE.search(_strip_comments(src)) or TAMPER_SOURCE.search(expanded(src))
        if m:
            found.append(f"the C++/CUDA source switches off what watches it or changes global state (`{m.group(0)}`)")
            break
    # every spelling found (the first few), as written and as the candidate's macros expand it
    texts = [t for src in sources for t in (_strip_comments(src), expanded(src))]
    routes = list(dict.fromkeys(" ".join(m.group(0).split()) for t in texts for m in PYTHON_SOURCE.finditer(t)))
    if routes:
        more = f" and {len(routes) - 4} more" if len(routes) > 4 else ""
        found.append("the C++/CUDA source reaches Python objects through pybind11 or the C API ("
                     + ", ".join(f"`{r}`" for r in routes[:4]) + more + "): the modules and objects of your process "
                     "are not your kernel's to walk to, and what they compute no monitor sees")
    if so_path:
        runs = python_from_cxx(so_path)
        if runs:
            found.append(f"the built extension reaches Python modules or runs Python code from C++ (`{runs[:80]}`): the verifier's "
                         "objects in your process are not yours to reach")
        guard_only = _inference_mode_only(built_from)
        for sym in imported_symbols(so_path):
            if TAMPER_SYMBOL.match(sym) and not (guard_only and _GUARD_TLS.match(sym)):
                found.append(f"the built extension imports `{sym.decode(errors='replace')[:80]}` (monitor or global "
                             "state control)")
                break
    return found


# ``c10::InferenceMode guard;`` (a documented RAII guard: autograd off in its scope) is inline: it reads and sets the
# thread's dispatch keys itself, so the binary imports the TLS that tampering would use. It excludes the autograd keys
# only: the Python key and the profiler's observer still see every op. Those imports are let through where the sources
# name the guard, spell none of the TLS routes (TAMPER_SOURCE) and rename nothing with an asm label (a declaration
# bound to another symbol: ``T f(...) __asm__("_ZN3c10...")``).
_GUARD_TLS = re.compile(rb"^_ZN3c104impl\d+(?:raw_local_dispatch_key_set|_force_tls_local_dispatch_key_set)\w*(@\w+)?$")
_INFERENCE_MODE = re.compile(r"\b(?:(?:c10|at|torch)\s*::\s*)?InferenceMode\s+\w+\s*[;({]|\b(?:c10|at|torch)\s*::\s*"
                             r"InferenceMode\s*[({]")
_ASM_LABEL = re.compile(r"\)\s*(?:const\s*|noexcept\s*)*(?:__asm__|__asm|asm)\s*\(\s*\"[^\"]*\"\s*\)\s*[;{=]")


def _inference_mode_only(sources) -> bool:
    texts = [str(s) for s in sources]
    return any(_INFERENCE_MODE.search(strip_cxx(t)) for t in texts) and not any(
        TAMPER_SOURCE.search(_strip_comments(t)) or TAMPER_SOURCE.search(expanded(t)) or _ASM_LABEL.search(t)
        for t in texts)


# a vendor library named in the link flags. Linked dynamically (``-lcublas``) it is judged by what the built module
# imports from it (``scan_library``): an unused ``-l`` flag imports nothing, with or without --as-needed. Linked
# statically (``-l:libcublas_static.a``, a path to an archive, ``-Wl,-Bstatic``) its code lands inside the module,
# where no imported symbol shows it: that is a finding by itself.
LINK_PATTERN = re.compile(r"(?:-l\s*:?\s*|\blib)(cublas\w*|cudnn\w*|cusparse\w*|cufft\w*|cusolver\w*|mkl\w*|openblas|"
                          r"blas|dnnl)")
_STATIC_LINK = re.compile(r"\.a\b|_static\b|-Bstatic|--whole-archive|^-static$")

# (library, pattern over the imported symbol names of the built .so; C++ names are mangled)
SYMBOL_PATTERNS = [
    ("cuBLAS", re.compile(rb"^(cublas\w+|_ZN2at4cuda4blas\w*|_ZN2at4cuda\d*getCurrentCUDABlas\w*)$")),
    ("cuDNN", re.compile(rb"^(cudnn\w+|_ZN2at6native\d*\w*cudnn\w*)$")),
    ("cuSPARSE/cuFFT/cuSOLVER", re.compile(rb"^(cusparse\w+|cufft\w+|cusolver\w+)$")),
    ("BLAS/MKL/oneDNN", re.compile(rb"^(cblas_\w+|mkl_\w+|sgemm_|dgemm_|_ZN4dnnl\w*|dnnl_\w+|_ZN2at6native\d*cpublas\w*|"
                                   rb"_ZN2at7cpublas\w*)$")),
    # at::_ops::X::call is how at::add / torch::matmul compile: it goes through the dispatcher, where the
    # runtime monitors judge it; its redispatch entry point and at::native skip the dispatcher
    ("ATen internals", re.compile(rb"^(_ZN2at6native\w+|_ZN2at4_ops\w+10redispatch\w+|_ZN2at10redispatch\w+)$")),
    ("dynamic loading", re.compile(rb"^(dlopen|dlsym|dlmopen|dlvsym)(@\w+)?$")),
    ("symbol tables", re.compile(rb"^(dl_iterate_phdr|dladdr1?|dlinfo|_r_debug)(@\w+)?$")),
]
# the ATen entry points a built extension imports, by namespace: at::_ops::<op>::call goes through the dispatcher
# (where the in-process monitors see it); at::cpu::<op>, at::cuda::<op>, at::meta::<op> and the composite
# namespaces call an op's kernel below the dispatcher (no monitor sees them); an operator looked up by name
# (c10::Dispatcher::findSchema...) can be any op
_ATEN_ENTRY = re.compile(rb"^_ZN2at(4_ops|3cpu|4cuda|4meta|27compositeexplicitautograd|27compositeimplicitautograd|"
                         rb"38compositeexplicitautogradnonfunctional)(\d+)")
_OP_LOOKUP = re.compile(rb"^_ZN3c1010Dispatcher\d+(findSchema\w*|findOp\w*|findSchemaOrThrow\w*)")
# C++ that imports Python modules, reads sys, or runs Python code it builds: the routes from an extension to the
# verifier's objects in its process (a first line only: pybind11 itself imports the frame readers, for its error
# messages, so those say nothing, and a builtins dict reached another way is not seen here). The C API's calls of a
# Python object are no rule here: honest CUDA extensions built against torch 2.11 import ``PyObject_CallObject``
# (85 of tests/gpu's, on an H200 at 1727720) and every pybind11 extension ``PyObject_Vectorcall`` or
# ``PyObject_CallFunctionObjArgs``; a call the source writes is the source scan's question (``PYTHON_SOURCE``)
PYTHON_FROM_CXX = re.compile(rb"^(PyRun_\w+|PyEval_EvalCode\w*|Py_CompileString\w*|PyImport_\w+|PySys_\w+|"
                             rb"PyMarshal_ReadObject\w*|PyEval_GetGlobals|PyEval_GetLocals|PyEval_GetFrame\w*|"
                             rb"PyBuiltin_\w+|PyFunction_GetGlobals)(@\w+)?$")


def aten_entries(so_path: str | Path) -> tuple[list[str], list[str], bool]:
    """The ATen names a built extension imports: (names called through the dispatcher (at::_ops), names called
    below it (at::cpu / at::cuda / at::meta / composite), whether it looks operators up by name). Names are the
    mangled struct or function names (``add_Tensor``, ``mm``); the caller resolves them to ops (with torch)."""
    through, below, lookup = [], [], False
    for sym in imported_symbols(so_path):
        if _OP_LOOKUP.match(sym):
            lookup = True
            continue
        m = _ATEN_ENTRY.match(sym)
        if not m:
            continue
        n = int(m.group(2))
        name = sym[m.end():m.end() + n].decode(errors="replace")
        (through if m.group(1) == b"4_ops" else below).append(name)
    return sorted(set(through)), sorted(set(below)), lookup


def python_from_cxx(so_path: str | Path) -> str:
    """The first imported CPython entry point that imports modules, reads sys or runs Python code ("" if none)."""
    for sym in imported_symbols(so_path):
        if PYTHON_FROM_CXX.match(sym):
            return sym.decode(errors="replace")
    return ""


@cheats.check(cheats.C01, where="front")
def scan_sources(sources: list[str], link_flags: list[str] | None = None) -> list[str]:
    """Findings in the candidate's C++/CUDA sources (as written, and with its own macros expanded) and link flags,
    each naming the library and the text."""
    found = []
    texts = [code_text(src) for src in sources] + [code_text(x) for x in map(expanded, sources) if x]
    for lib, pat in SOURCE_PATTERNS:
        for text in texts:
            m = pat.search(text)
            if m:
                found.append(f"the C++/CUDA source uses {lib} (`{m.group(0).strip()}`)")
                break
    below = sorted({f"at::{m.group(1)}::{m.group(2)}" for text in texts for m in _BELOW_DISPATCHER.finditer(text)
                    if m.group(2) in aten_op_names()})
    if below:
        found.append("the C++/CUDA source calls ATen's kernels below the dispatcher (" + ", ".join(below[:4]) + ")")
    flags = [str(f) for f in link_flags or []]
    static = any(_STATIC_LINK.search(f) for f in flags)
    for flag in flags:
        m = LINK_PATTERN.search(flag)
        if m and (static or _STATIC_LINK.search(flag)):
            found.append(f"links `{m.group(1)}` statically (extra_ldflags `{flag[:80]}`): its code would be inside "
                         "the module, where no imported symbol shows what it computes")
    return found


# an ATen operator's kernel called by its backend's namespace (``at::cpu::mm``, ``at::cuda::_softmax``): below the
# dispatcher, where neither monitor sees it. The name must be an operator's: ``at::cuda::getCurrentCUDAStream``,
# ``at::cuda::CUDAGuard`` and the other device helpers are not. The binary shows the same call by its symbol
# (``aten_entries``); the source shows it before any build, for an extension built where the binary could be
# replaced before it is read (one the candidate's process builds itself).
_BELOW_DISPATCHER = re.compile(r"\bat\s*::\s*(cpu|cuda|meta|composite\w*)\s*::\s*(\w+)\s*[(<]")


@functools.lru_cache(maxsize=1)
def aten_op_names() -> frozenset:
    """The names of PyTorch's aten operators (``mm``, ``_softmax``), overloads dropped."""
    import torch  # noqa: PLC0415 - only where a source names a backend's namespace

    return frozenset(n.split("::", 1)[1].split(".", 1)[0] for n in torch._C._dispatch_get_all_op_names()
                     if n.startswith("aten::"))


_INCLUDE_LINE = re.compile(r"^[ \t]*#[ \t]*(?:include|include_next|import|embed)\b.*$", re.M)
_PASTE = re.compile(r"##|#[ \t]*define\b")


@functools.lru_cache(maxsize=256)
def expanded(src: str) -> str:
    """``src`` with the candidate's own macros expanded by the C preprocessor (its ``#include`` lines removed first:
    nothing is read from disk, torch's macros stay as written), so that a name pasted together (``at##tr``,
    ``cu##blas##Sgemm``) or hidden behind a ``#define`` reads as the compiler will see it; "" when the source
    defines no macro, or the preprocessor is missing, fails or runs over 10 s (the scans then read the text as
    written, and the built binary's imported symbols still show what links)."""
    if not _PASTE.search(src):
        return ""
    cpp = shutil.which("cpp")
    if cpp is None:
        return ""
    try:
        r = subprocess.run([cpp, "-P", "-w", "-x", "c++", "-nostdinc", "-"], input=_INCLUDE_LINE.sub("", src),
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return r.stdout if r.returncode == 0 else ""


def join_splices(src: str) -> str:
    """``src`` with its line splices joined (a backslash before a newline: the compiler's translation phase 2,
    before comments, strings and macros are read), each joined line followed by as many empty lines as it took, so
    the lines after it keep their numbers. Without this ``at\\<newline>tr(`` reads as two harmless lines."""
    if "\\\n" not in src and "\\\r\n" not in src:
        return src
    out, logical, taken = [], [], 0
    for line in src.split("\n"):
        body = line[:-1] if line.endswith("\r") else line
        if body.endswith("\\"):
            logical.append(body[:-1])
            taken += 1
            continue
        out.append("".join(logical) + line)
        out.extend([""] * taken)
        logical, taken = [], 0
    if logical:
        out.append("".join(logical))
        out.extend([""] * (taken - 1))
    return "\n".join(out)


def strip_cxx(src: str, strings: bool = False, keep_names: bool = False) -> str:
    """C/C++ source with its line splices joined (``join_splices``), its comments replaced by spaces (newlines
    kept, so line numbers stay), and with
    ``strings`` the contents of string and character literals (raw strings too) blanked, except, with
    ``keep_names``, a string that is exactly one identifier (``cuModuleGetFunction(&f, mod, "relu_kernel")``). A
    small lexer, not a regex: a ``//`` inside a string literal (``"http://..."``) starts no comment, a quote in a
    comment no string."""
    src = join_splices(src)
    out: list[str] = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" ")
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(" " + "\n" * src.count("\n", i, j))
        elif c == '"' and i > 0 and src[i - 1] == "R" and _RAW_PREFIX.search(src, max(0, i - 4), i + 1):
            k = src.find("(", i + 1)
            delim = src[i + 1:k] if 0 <= k - i - 1 <= 16 else None
            if delim is None or any(ch in delim for ch in ' \\)\n\t"'):
                j = i + 1  # not a raw string after all: the quote opens nothing we understand; keep going
                out.append(c)
            else:
                end = src.find(")" + delim + '"', k + 1)
                j = n if end < 0 else end + len(delim) + 2
                out.append('""' + "\n" * src.count("\n", i, j) if strings else src[i:j])
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            keep = not strings or (keep_names and c == '"' and re.fullmatch(r'"[A-Za-z_]\w*"', src[i:j]))
            out.append(src[i:j] if keep else c + c)
        else:
            m = _PLAIN.match(src, i + 1)
            j = m.end() if m else i + 1
            out.append(src[i:j])
        i = j
    return "".join(out)


_PLAIN = re.compile(r"[^/\"']*")
# R"( starts a raw string when R is the prefix (alone, or after u8, u, U, L), not the end of an identifier
_RAW_PREFIX = re.compile(r'(?:^|[^\w])(?:u8|u|U|L)?R"$')


_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(?:[^\n\\]|\\\n|\\.)*", re.M)


def code_text(src: str) -> str:
    """What of a source can call anything: comments, string literals and ``#include`` lines removed, and every
    macro that is defined but never expanded (its name used nowhere else) dropped with its body."""
    text = strip_cxx(src, strings=True)
    text = re.sub(r"^[ \t]*#[ \t]*include\b[^\n]*", " ", text, flags=re.M)
    for _ in range(8):  # a macro used only by an unused macro is unused too
        defines = list(_DEFINE.finditer(text))
        if not defines:
            break
        uses = Counter(_WORD.findall(text))
        unused = [m for m in defines if uses[m.group(1)] == _WORD.findall(m.group(0)).count(m.group(1))]
        if not unused:
            break
        for m in reversed(unused):
            text = text[:m.start()] + "\n" * m.group(0).count("\n") + text[m.end():]
    return text


_WORD = re.compile(r"\w+")


def _strip_comments(src: str) -> str:
    return strip_cxx(src)


def _elf_sections(so_path: str | Path) -> tuple[bytes, list[tuple]] | None:
    """The bytes of a 64-bit little-endian ELF file (what the compilers here produce) and its section headers, each
    ``(type, offset, size, link, entsize)``; None when the file cannot be read or is not such an ELF file. The one
    minimal reader behind ``imported_symbols`` and ``needed_libraries``: no binutils, no third-party package, so it
    runs wherever the verifier runs."""
    try:
        data = Path(so_path).read_bytes()
    except OSError:
        return None
    if len(data) < 0x40 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    try:
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, _ = struct.unpack_from("<HHH", data, 0x3A)
        sections = []
        for i in range(shnum):
            _name, stype, _flags, _addr, soff, size, link, _info, _align, entsize = \
                struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
            sections.append((stype, soff, size, link, entsize))
    except struct.error:
        return None
    return data, sections


def _entries(so_path: str | Path, section_type: int, read) -> list:
    """``read(data, entry_offset, strings_offset)`` over the fixed-size entries of every section of
    ``section_type``, stopping a section where it returns ``StopIteration``; its non-None results, in order. A
    malformed table ends the walk: what was read so far is returned."""
    elf = _elf_sections(so_path)
    if elf is None:
        return []
    data, sections = elf
    out = []
    try:
        for stype, soff, size, link, entsize in sections:
            if stype != section_type or not entsize:
                continue
            str_off = sections[link][1]
            for j in range(size // entsize):
                got = read(data, soff + j * entsize, str_off)
                if got is StopIteration:
                    break
                if got is not None:
                    out.append(got)
    except (struct.error, IndexError, ValueError):
        pass
    return out


def _cstring(data: bytes, at: int) -> bytes:
    return data[at:data.index(b"\0", at)]


def _undefined_symbol(data: bytes, at: int, strings: int):
    st_name, _st_info, _other, st_shndx, _value, _size = struct.unpack_from("<IBBHQQ", data, at)
    return _cstring(data, strings + st_name) if st_shndx == 0 and st_name else None  # not defined here, not null


def imported_symbols(so_path: str | Path) -> list[bytes]:
    """The undefined (imported) dynamic symbols (.dynsym) of an ELF shared object; [] when it cannot be read."""
    return _entries(so_path, 11, _undefined_symbol)  # SHT_DYNSYM


# What an extension may take from PyTorch's own compute libraries (libtorch_cpu, libtorch_cuda: where ATen's
# kernels live, and the MKL, BLAS, fbgemm, NNPACK and flash-attention code linked into them) by name: an
# allowlist, because a denylist of the libraries' names misses the next one (Fortran ``SGEMM`` / ``sgemm``,
# MKL's ``vsExp``, ``fbgemm::cblas_sgemm_ref`` bound under an asm label all passed one). Allowed: the operators'
# dispatcher entry points (``at::_ops::<op>::call``, which the runtime monitors judge), tensor methods and
# metadata, allocation helpers, ``at::parallel_for``'s threads, the device and stream helpers, autograd's
# bookkeeping, ``TORCH_LIBRARY`` registration of the candidate's own operators, SLEEF's vector math (what
# ``at::vec::Vectorized<float>::exp`` compiles to). Below the dispatcher (``at::cpu::`` / ``at::cuda::``
# operators) is judged by ``aten_entries``; the dispatcher's own handles, listeners and the JIT's operator tables
# are not allowed. c10 (no kernels), libtorch_python (bindings) and the runtime libraries are not judged here.
TORCH_IMPORT_ALLOWED = re.compile(rb"^(?:" + rb"|".join([
    rb"_ZN2at4_ops\d+\w+?4callE",  # at::_ops::<op>::call
    # class members and free functions by their exact mangled name (a length-prefixed identifier each), so that no
    # pattern reaches into a longer name that holds it (``at::native::<x>_TensorIterator_kernel``, 663 such
    # exports in libtorch_cpu, matched an unanchored ``\w*TensorIterator``)
    rb"_ZNK?2at(?:10TensorBase|6Tensor|9TensorArg)(?:C[12]|D[012]|\d)", rb"_ZT[VIS]N2at(?:6Tensor|10TensorBase)E",
    rb"_ZNK?2at(?:14TensorIterator|18TensorIteratorBase|20TensorIteratorConfig)(?:C[12]|D[012]|\d)",
    rb"_ZNK?2at\d+check[A-Z_]\w*?E",
    # a tensor over memory the caller owns (``torch::from_blob``, ``at::for_blob``: at::TensorMaker), allocation only;
    # a profiler range around the extension's own work (``RECORD_FUNCTION``), which makes it more visible, not less
    rb"_ZNK?2at11TensorMaker(?:C[12]|D[012]|\d)", rb"_ZNK?2at14RecordFunction(?:C[12]|D[012]|\d)",
    rb"_ZN2at\d+(?:has_internal_overlap|assert_no_internal_overlap|assert_no_partial_overlap|assert_no_overlap|"
    rb"get_overlap_status)E",
    rb"_ZNK?2at6detail", rb"_ZNK?2at8internal", rb"_ZNK?2at3vec",
    rb"_ZN2at\d+(?:get|set)_(?:num_threads|thread_num|num_interop_threads)", rb"_ZN2at18in_parallel_region",
    rb"_ZN2at16init_num_threads", rb"_ZN2at13globalContext", rb"_ZNK?2at7Context",
    # device helpers (at::cuda::<op> and at::cpu::<op>, an op's kernel below the dispatcher, are not: ATen's CUB
    # wrappers, the jiterator and the blas handles neither)
    rb"_ZNK?2at4cuda\d+(?:getCurrentDeviceProperties|getDeviceProperties|warp_size|getCurrentCUDAStream|"
    rb"getStreamFromPool|getDefaultCUDAStream|getNumGPUs|is_available|device_count|current_device|set_device|"
    rb"device_synchronize|memcpy_and_sync|stream_synchronize|getCurrentCUDAContext|CUDAEvent|CUDAStream|"
    rb"CUDAGuard|OptionalCUDAGuard|CUDAStreamGuard)", rb"_ZNK?2at4cuda6detail",
    rb"_ZNK?2at3cpu\d+(?:is_\w+|get_cpu_capability|L1d_cache_size|L2_cache_size)",
    rb"_ZNK?2at(?:16CPUGeneratorImpl|17CUDAGeneratorImpl)(?:C[12]|D[012]|\d)",
    rb"_ZNK?2at(?:24DeprecatedTypeProperties|32DeprecatedTypePropertiesRegistry)(?:C[12]|D[012]|\d)",
    rb"_ZN2at\d+getDeprecatedType", rb"_ZNK?2at5printE", rb"_ZNK?2at8toStringE",
    rb"_ZT[VIS]N5torch8autograd(?!8profiler)", rb"_ZNK?5torch8autograd(?!8profiler)",
    rb"_ZNR?K?5torch7Library", rb"_ZNK?5torch11CppFunction", rb"_ZNK?5torch6detail", rb"_ZN5torch3jit(?:11parseSchema|17parseSchemaOrName)E",
    rb"_ZNK?3c106detail12infer_schema", rb"_ZNK?3c10\d+\w*Type3getE", rb"_ZNK?3c106IValue",
    rb"_ZNK?3c104impl\d*\w*(?:Guard|TLS|tls_)\w*", rb"_ZNK?3c10\d*\w*Warning",
    rb"Sleef_\w+",
]) + rb")")
# the libraries judged: PyTorch's, where its kernels are (not c10, the bindings or the bundled runtime libraries)
_TORCH_COMPUTE_LIB = re.compile(r"^libtorch(?:_cpu|_cuda\w*|_hip\w*)?\.so")
# names that are PyTorch's whichever library would resolve them (one this process has not loaded, or none)
_TORCH_NAMESPACE = re.compile(rb"^_Z(?:N|NK|NR|NKR|T[VIS]N)(?:2at|5torch|6fbgemm|13pytorch_flash|6caffe2|"
                              rb"3c1010Dispatcher|3c1014OperatorHandle|3c104impl13OperatorEntry)")


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p), ("dli_sname", ctypes.c_char_p),
                ("dli_saddr", ctypes.c_void_p)]


_LIBRARIES: list = []  # the answer of ``_torch_libraries`` once PyTorch's libraries were found loaded


def _torch_libraries() -> tuple:
    """(dlsym, dladdr, handles) of PyTorch's libraries already loaded in this process (the verifier imports
    torch; ``RTLD_NOLOAD`` loads nothing new), or () where they cannot be read (asked again next time: torch may
    be imported later)."""
    if _LIBRARIES:
        return _LIBRARIES[0]
    try:
        spec = importlib.util.find_spec("torch")
        libdir = Path(spec.origin).parent / "lib" if spec and spec.origin else None
        libc = ctypes.CDLL(None)
        dlsym, dladdr = libc.dlsym, libc.dladdr
        dlsym.restype, dlsym.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]
        dladdr.restype, dladdr.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        handles = []
        for f in sorted(os.listdir(libdir)) if libdir and libdir.is_dir() else []:
            if f.startswith(("libtorch", "libc10")) and ".so" in f:
                try:
                    handles.append(ctypes.CDLL(str(libdir / f), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)._handle)
                except OSError:  # not loaded here
                    pass
        if not handles:
            return ()
        _LIBRARIES.append((dlsym, dladdr, tuple(handles)))
        return _LIBRARIES[0]
    except (OSError, AttributeError, ValueError):
        return ()


def _defined_in(sym: bytes) -> str:
    """The file name of the PyTorch library that defines ``sym`` in this process ("" if none does)."""
    libs = _torch_libraries()
    if not libs:
        return ""
    dlsym, dladdr, handles = libs
    for h in handles:
        addr = dlsym(h, sym)
        if addr:
            info = _DlInfo()
            if dladdr(addr, ctypes.byref(info)) and info.dli_fname:
                return os.path.basename(info.dli_fname.decode(errors="replace"))
            return ""
    return ""


def torch_imports(so_path: str | Path) -> list[tuple[str, str]]:
    """(symbol, library) for each symbol the built extension takes from PyTorch's compute libraries that
    ``TORCH_IMPORT_ALLOWED`` does not name: code of PyTorch's that no runtime monitor sees."""
    return [(sym.decode(errors="replace"), lib) for sym in imported_symbols(so_path) if (lib := taken_from_torch(sym))]


def taken_from_torch(sym: bytes) -> str:
    """The PyTorch library an imported ``sym`` is code of, where ``TORCH_IMPORT_ALLOWED`` does not allow it ("" for
    an allowed symbol or one of another library); "PyTorch" for a PyTorch name no loaded library defines."""
    if TORCH_IMPORT_ALLOWED.match(sym):
        return ""
    lib = _defined_in(sym)
    if _TORCH_COMPUTE_LIB.match(lib):
        return lib
    return "PyTorch" if not lib and _TORCH_NAMESPACE.match(sym) else ""

# CUDA 13's CCCL (cub, thrust, libcu++: header-only building blocks) loads the driver's entry points itself: a
# module that includes it imports dlopen / dlsym whatever its own code does (an honest CUB reduction,
# technoabsurdist-l1-p95, was C01 for it). There the import says nothing; a dlopen the candidate writes still shows
# in its source (SOURCE_PATTERNS), and a library it fetches runs kernels the run-time coverage sees by name.
_CCCL_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?:cub|thrust|cuda|nv)/', re.M)


def _needed_entry(data: bytes, at: int, strings: int):
    tag, val = struct.unpack_from("<qQ", data, at)
    if tag == 0:  # DT_NULL ends the table
        return StopIteration
    return _cstring(data, strings + val).decode(errors="replace") if tag == 1 else None  # DT_NEEDED


def needed_libraries(so_path: str | Path) -> list[str]:
    """The shared libraries an ELF shared object names as needed (its ``DT_NEEDED`` entries, in order); [] when it
    cannot be read."""
    return _entries(so_path, 6, _needed_entry)  # SHT_DYNAMIC


# What an extension may link: the C and C++ runtimes, OpenMP and TBB, PyTorch's own libraries, Python, and the CUDA
# runtime, driver, NVRTC and NVTX (CUDA's compute libraries are allowed to link here: what the module imports from
# them is judged by SYMBOL_PATTERNS). Any other library is code that is not the candidate's kernel (numpy's
# OpenBLAS linked by path, a BLAS or FFT library of the system): deny by default.
LINKABLE = re.compile(r"^(?:lib(?:c|m|dl|rt|pthread|util|stdc\+\+|gcc_s|atomic|gomp|omp|iomp5|tbb\w*|c10\w*|torch\w*|shm|"
                      r"cudart|cuda|nvrtc[\w-]*|nvToolsExt|nvtx\w*|cublas\w*|cudnn\w*|cusparse\w*|cufft\w*|cusolver\w*|"
                      r"curand|python3[\w.]*)|ld-linux[\w.-]*)\.so(?:\.[\w.]+)?$")


@cheats.check(cheats.C01, where="binary")
def scan_library(so_path: str | Path, sources: list[str] | tuple = ()) -> list[str]:
    """Findings in the libraries a built extension links (``LINKABLE``) and the symbols it imports, each naming the
    library and one symbol; ``sources``, the C++/CUDA it was built from, explain a dynamic-loading import where
    they include CCCL."""
    foreign = [lib for lib in needed_libraries(so_path) if not LINKABLE.match(os.path.basename(lib))]
    if foreign:
        return [f"the built extension links `{foreign[0][:80]}`" + (f" and {len(foreign) - 1} more" if len(foreign) > 1
                else "") + ": a library outside the C/C++ runtimes, PyTorch and CUDA; its code is not your kernel"]
    found: dict[str, bytes] = {}
    cccl = any(_CCCL_INCLUDE.search(strip_cxx(str(src))) for src in sources)
    for sym in imported_symbols(so_path):
        for lib, pat in SYMBOL_PATTERNS:
            if lib in found or not pat.match(sym) or (cccl and lib == "dynamic loading"):
                continue
            found[lib] = sym
    lines = [f"the built extension imports {lib} (`{sym.decode(errors='replace')[:80]}`)" for lib, sym in found.items()]
    taken = torch_imports(so_path)
    if taken:
        lines.append(f"the built extension takes code from PyTorch's {taken[0][1]} that is not an operator's "
                     f"dispatcher entry, a tensor method or an allocation helper (`{taken[0][0][:80]}`"
                     + (f" and {len(taken) - 1} more" if len(taken) > 1 else "") + "): compute no monitor sees")
    return lines


@dataclass
class BinaryScan:
    """What the scans of built extensions found, read outside the candidate's process: C01 lines (``vendor``: a
    vendor library, ATen's kernels below the dispatcher, operators looked up by name), C11 lines (``tamper``) and
    the ATen compute ops the binaries import (``compute``: ``aten::mm``; PyTorch compute in forward whatever thread,
    process or guard runs it, judged by the legality policy)."""

    vendor: list[str] = field(default_factory=list)
    tamper: list[str] = field(default_factory=list)
    compute: list[str] = field(default_factory=list)


def scan_binary(so_paths: list[str], sources: list[str]) -> BinaryScan:
    """The linker's view of built extensions ``so_paths`` (built from ``sources``): what each calls by name, however
    the source spelled it. Used for the compile pool's builds (verifier/engine.py) and for the builds a candidate's
    process asks for at run time (verifier/build/runtime.py) alike."""
    from verifier.common.ops import aten_op_of, forbidden  # torch: imported where a binary is scanned

    out = BinaryScan()
    below: list[str] = []
    for so in so_paths:
        out.vendor += scan_library(so, sources)
        out.tamper += scan_tampering([], so, sources)
        through, under, lookup = aten_entries(so)
        below += [f"at::{op}" for op in {aten_op_of(n) for n in under} if op]
        if lookup:
            below.append("operators looked up by name (c10::Dispatcher::findSchema)")
        out.compute += forbidden(f"aten::{op}" for op in {aten_op_of(n) for n in through} if op)
    if below:
        out.vendor.append("the built extension calls ATen's kernels below the dispatcher: " + ", ".join(sorted(set(below))[:6]))
    out.compute = sorted(set(out.compute))
    return out
