"""Vendor-library and ATen compute, and monitor tampering, in a candidate's own C++/CUDA source text (cheats C01, C11).

The runtime dispatch monitors see ATen ops that go through the dispatcher. They do not see a candidate
whose C++ calls cuBLAS, cuBLASLt, cuDNN, CUTLASS, oneDNN / MKL / BLAS, or ATen's internal kernels
(``at::native::``, ``at::cuda::blas::``) directly. Three independent checks catch that; this module holds the first:

1. ``scan_sources``: the candidate's C++/CUDA source text: the library's identifiers in use (calls, handles,
   types, namespaces), not its includes (an unused ``#include <cublas_v2.h>`` computes nothing), an operator's
   kernel called by its backend's namespace (``at::cpu::mm``, below the dispatcher), and link flags that put a
   library's code inside the module (static linking); a dynamic ``-lcublas`` is judged by (2);
2. the libraries and dynamic symbols of the built extension (verifier/front/binary.py ``scan_library``, over the ELF
   reader of verifier/front/elf.py);
3. at run time on cuda, the share of forward device time spent in kernels named in the candidate's sources
   (verifier/child/worker.py, judged in verifier/judge/verdict.py): a cuBLAS or cuDNN kernel shows by name.

Also here, for C11: the spellings of C++ that switches off what watches forward or reaches Python objects
(``TAMPER_SOURCE``, ``PYTHON_SOURCE``) and whether the sources' only dispatch-key TLS is ``c10::InferenceMode``'s
guard (``inference_mode_only``); verifier/front/binary.py ``scan_tampering`` reads them beside the binary's imports.
And the readers of C++ text the other stages share: ``join_splices``, ``strip_cxx`` (a small lexer: comments and
literals blanked), ``code_text`` (what can call anything) and ``expanded`` (the candidate's own macros expanded).

What it guarantees: text only is read; nothing is built, loaded or run here but the C preprocessor over the
candidate's own macros (its ``#include`` lines removed: nothing is read from disk) and, where a source names a
backend's namespace, torch's list of operators. What it does not: a name the preprocessor builds is seen only where
``cpp`` is present and expands the source in time, and a name built at run time (a string handed to ``dlsym``) never
shows in text; the built binary's imports (2) and the run-time coverage (3) are the backstop.

Each finding names the library. Honest look-alikes that must pass: allocation and stream helpers
(``at::cuda::getCurrentCUDAStream``, ``torch::empty``), ``cub``/``thrust`` primitives are not flagged here
(header-only building blocks compiled into the candidate's own kernels).
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path
from collections import Counter

from verifier import cheats

# the loops of ATen/native/cpu/Loops.h and ATen/native/cuda/Loops.cuh that call the candidate's functor on every element
# of a TensorIterator (at::parallel_for's threads, at::vec's lanes): the candidate's compute, as the header is a
# building block (``ATEN_BUILDING_BLOCKS``); called ``at::native::cpu_kernel_vec(iter, ...)``
ELEMENTWISE_LOOPS = ("cpu_kernel", "cpu_kernel_vec", "cpu_serial_kernel", "cpu_serial_kernel_vec",
                     "cpu_kernel_multiple_outputs", "gpu_kernel", "gpu_kernel_with_scalars", "gpu_kernel_multiple_outputs")

# (library, pattern over source text)
# The patterns read the code a compiler would compile: comments, string literals, #include lines and macros that are
# defined but never expanded are removed first (``code_text``). An include alone computes nothing: a library is
# judged by its identifiers in use (calls, handles, types, namespaces); a name the preprocessor builds
# (``cu##blas##Sgemm``) never shows here and is caught by the built module's imported symbols (verifier/front/binary.py
# ``scan_library``).
SOURCE_PATTERNS = [
    ("cuBLAS", re.compile(r"\bcublas\w*|getCurrentCUDABlas(Lt)?Handle|\bat::cuda::blas\b")),
    ("cuDNN", re.compile(r"\bcudnn\w*|\bat::native::cudnn")),
    # header-only: no imported symbol shows it, its namespace does (``cute::``, ``using namespace cute``, an alias,
    # the namespace reopened); on cuda its kernels are foreign by name in the time coverage. A name of the candidate's
    # own that is spelled the same (a function ``cute``, a variable ``cutlass``) is no use of the namespace
    ("CUTLASS", re.compile(r"\b(?:cutlass|cute)\s*::|\bnamespace\s+(?:::\s*)?(?:cutlass|cute)\b|"
                           r"\bnamespace\s+\w+\s*=\s*(?:::\s*)?(?:cutlass|cute)\b")),
    ("cuSPARSE/cuFFT/cuSOLVER", re.compile(r"\bcusparse\w+|\bcufft\w+|\bcusolver\w+")),
    ("BLAS/MKL/oneDNN", re.compile(r"\bcblas_\w+|\bmkl_\w+|\bdnnl(::|_)\w*|\bmkldnn\w*|\bsgemm_\s*\(|\bat::native::cpublas|"
                                   r"\bat::cpublas\b")),
    # ATen's implementations by any route into their namespace: a qualified call, a using-directive or -declaration
    # (``using namespace at::native;``, then unqualified calls), an alias, the namespace reopened around the caller;
    # but for a qualified call of the elementwise loops that run the candidate's own functor over a TensorIterator
    # (``ELEMENTWISE_LOOPS``: ATen/native/cpu/Loops.h, ATen/native/cuda/Loops.cuh, building blocks below)
    ("ATen internals", re.compile(r"\bat\s*::\s*native\b(?!\s*::\s*(?:" + "|".join(ELEMENTWISE_LOOPS) + r")\s*[(<])|"
                                  r"\bnamespace\s+at\s*\{\s*(?:inline\s+)?namespace\s+native\b|"
                                  r"\bat\s*::\s*redispatch\s*::\s*\w+|::\s*redispatch\s*\(")),
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
    r"\b(?:__globals__|__builtins__|__import__|__dict__|__class__|__subclasses__)\b|"
    # a Python object held or called from C++ (a callable handed in, ``tile(A, B)`` on a thread that took the GIL:
    # PyTorch's matmul run where no monitor of that call looks), and pybind11's conversion of a Python callable to a
    # ``std::function`` (its header: an include line, read before includes are dropped). None of the test bed's 1,695
    # model-written solutions holds one; returning tensors, tuples and lists needs none
    r"\b(?:py|pybind11)\s*::\s*(?:object|handle|function|callable|gil_scoped_acquire|reinterpret_(?:borrow|steal)|"
    r"cpp_function)\b|\bgil_scoped_acquire\b|\bpybind11/functional\.h\b")


# a constant set on the module being created inside ``PYBIND11_MODULE(name, m) { ... }``:
# ``m.attr("__version__") = "1.0";``, ``m.attr("BLOCK_SIZE") = py::int_(256);``, the module's own attributes as
# ``m.doc() = ...`` sets its docstring, read by nobody but the candidate's Python. It walks to no other object: the
# module variable is the macro's own, the name a plain identifier (no dunder but ``__version__``, ``__doc__``,
# ``__all__``, ``__author__``) and the attribute only stored (``=``, not ``==``), never read or called. The value
# stored is read by the pattern as any other text (``= py::module_::import("numpy")`` still shows its import)
_PYBIND_MODULE = re.compile(r"\bPYBIND11_MODULE\s*\(\s*\w+\s*,\s*([A-Za-z_]\w*)\s*\)\s*\{")
_MODULE_CONSTANT = r"\b{var}\s*\.\s*attr\s*\(\s*\"(?:__(?:version|doc|all|author)__|(?!_)\w+|_[A-Za-z0-9]\w*)\"\s*\)(?=\s*=(?!=))"


def without_module_constants(text: str) -> str:
    """``text`` (comments stripped) with each ``m.attr("NAME")`` that only sets a constant on the module
    ``PYBIND11_MODULE`` creates blanked (``_MODULE_CONSTANT``), inside that macro's body only; every other
    ``.attr(`` stays for ``PYTHON_SOURCE``."""
    for mod in reversed(list(_PYBIND_MODULE.finditer(text))):
        depth, end, quote, i = 0, len(text), "", mod.end() - 1
        while i < len(text):  # the body's closing brace, braces inside string and character literals not counted
            c = text[i]
            if quote:
                quote = "" if c == quote else quote
                i += 2 if c == "\\" else 1
                continue
            quote = c if c in "\"'" else ""
            depth += {"{": 1, "}": -1}.get(c, 0)
            if depth == 0:
                end = i
                break
            i += 1
        body = re.sub(_MODULE_CONSTANT.format(var=re.escape(mod.group(1))), lambda x: " " * len(x.group(0)),
                      text[mod.end():end])
        text = text[:mod.end()] + body + text[end:]
    return text


# ``c10::InferenceMode guard;`` (a documented RAII guard: autograd off in its scope) is inline: it reads and sets the
# thread's dispatch keys itself, so the binary imports the TLS that tampering would use (verifier/front/binary.py
# ``_GUARD_TLS``). It excludes the autograd keys only: the Python key and the profiler's observer still see every op.
# Those imports are let through where the sources name the guard, spell none of the TLS routes (TAMPER_SOURCE) and
# rename nothing with an asm label (a declaration bound to another symbol: ``T f(...) __asm__("_ZN3c10...")``).
_INFERENCE_MODE = re.compile(r"\b(?:(?:c10|at|torch)\s*::\s*)?InferenceMode\s+\w+\s*[;({]|\b(?:c10|at|torch)\s*::\s*"
                             r"InferenceMode\s*[({]")
_ASM_LABEL = re.compile(r"\)\s*(?:const\s*|noexcept\s*)*(?:__asm__|__asm|asm)\s*\(\s*\"[^\"]*\"\s*\)\s*[;{=]")


def inference_mode_only(sources) -> bool:
    texts = [str(s) for s in sources]
    return any(_INFERENCE_MODE.search(strip_cxx(t)) for t in texts) and not any(
        TAMPER_SOURCE.search(strip_comments(t)) or TAMPER_SOURCE.search(expanded(t)) or _ASM_LABEL.search(t)
        for t in texts)


# what a candidate's source defines: a function with its body, a class, struct, union or enum with its body, a type
# alias, a macro, a namespace it opens, a variable given its type (``int mkl_threads = 1;``, ``float cute_scale[4];``).
# A declaration without a body (``cublasStatus_t cublasSgemm_v2(...);``, the library's function declared by hand)
# defines nothing
_TYPE_DEFINED = re.compile(r"\b(?:struct|class|union|enum(?:\s+class|\s+struct)?)\s+(?:\w+\s+)*?([A-Za-z_]\w*)\s*"
                           r"(?:final\s*)?[:{]|\busing\s+([A-Za-z_]\w*)\s*=|^[ \t]*#[ \t]*define[ \t]+(\w+)|"
                           r"\bnamespace\s+([A-Za-z_]\w*)\s*\{", re.M)
_VARIABLE_DEFINED = re.compile(r"\b([A-Za-z_][\w:]*(?:\s*<[^;<>{}()]*(?:<[^;<>{}()]*>[^;<>{}()]*)*>)?)[\s*&]+"
                               r"([A-Za-z_]\w*)\s*(?:=(?!=)|;|\[|\{)")
_NOT_TYPES = frozenset({"return", "goto", "case", "throw", "delete", "new", "else", "do", "co_return", "co_yield",
                        "sizeof", "typedef", "using", "namespace", "operator", "template", "typename", "public",
                        "private", "protected", "default", "if", "while", "for", "switch", "and", "or", "not"})


def own_names(texts: list[str]) -> frozenset:
    """The identifiers the candidate's code texts (``code_text``) define themselves (``_DEFINED``, ``_TYPE_DEFINED``,
    ``_VARIABLE_DEFINED``): its own code, whatever a library's prefix they share."""
    names: set[str] = set()
    for text in texts:
        names |= {m.group(1) for m in _DEFINED.finditer(text)} - _NOT_FUNCTIONS
        names |= {g for m in _TYPE_DEFINED.finditer(text) for g in m.groups() if g}
        names |= {m.group(2) for m in _VARIABLE_DEFINED.finditer(text) if m.group(1) not in _NOT_TYPES}
    return frozenset(names)


# a vendor library named in the link flags. Linked dynamically (``-lcublas``) it is judged by what the built module
# imports from it (binary.py ``scan_library``): an unused ``-l`` flag imports nothing, with or without --as-needed.
# Linked statically (``-l:libcublas_static.a``, a path to an archive, ``-Wl,-Bstatic``) its code lands inside the
# module, where no imported symbol shows it: that is a finding by itself.
LINK_PATTERN = re.compile(r"(?:-l\s*:?\s*|\blib)(cublas\w*|cudnn\w*|cusparse\w*|cufft\w*|cusolver\w*|mkl\w*|openblas|"
                          r"blas|dnnl)")
_STATIC_LINK = re.compile(r"\.a\b|_static\b|-Bstatic|--whole-archive|^-static$")


@cheats.probe(cheats.C01, where="front")
def scan_sources(sources: list[str], link_flags: list[str] | None = None) -> list[str]:
    """Findings in the candidate's C++/CUDA sources (as written, and with its own macros expanded) and link flags,
    each naming the library and the text."""
    found = []
    texts = [code_text(src) for src in sources] + [code_text(x) for x in map(expanded, sources) if x]
    own = own_names(texts)
    for lib, pat in SOURCE_PATTERNS:
        for text in texts:
            # a library's prefix on a name the candidate defines itself (a kernel ``cublas_like_sgemm``, a variable
            # ``mkl_threads``) is its own code: the library's functions are declared by its headers, never defined
            # by the candidate (one that were, calling the library, would import it: binary.py ``scan_library``)
            m = next((m for m in pat.finditer(text) if m.group(0).strip() not in own), None)
            if m:
                found.append(f"the C++/CUDA source uses {lib} (`{m.group(0).strip()}`)")
                break
    # ``native::`` reached through ``at`` made visible (``using namespace at;``) or renamed (``namespace A = at;``)
    for text in texts:
        m = _AT_OPENED.search(text) and _NATIVE_AFTER.search(text)
        if m:
            found.append(f"the C++/CUDA source uses ATen internals (`{m.group(0).strip()}` with the namespace at opened)")
            break
    used = aten_header_functions(sources, texts)
    if used:
        found.append("the C++/CUDA source calls PyTorch's own kernel implementations compiled from its headers ("
                     + ", ".join(used[:4]) + ")")
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


# PyTorch's kernel implementations are header-only in places (ATen/native/cpu/*KernelImpl.h, ATen/native/cuda/
# PersistentSoftmax.cuh's ``dispatch_softmax_forward`` at global scope, its kernels in an anonymous namespace): included,
# they compile into the candidate's own module, where neither the dispatcher's monitors nor the binary's imports nor
# the module identity of a CUDA kernel tell them from the candidate's. A function such a header defines, called by
# the candidate's code, is PyTorch's compute. Building blocks are not (as cub's and thrust's are not): the headers of
# reductions' and loads' helpers, launch constants, atomics and scalar or vector math, and the elementwise loops that
# run the candidate's own functor.
_AT_OPENED = re.compile(r"\busing\s+namespace\s+(?:::\s*)?at\s*;|\bnamespace\s+\w+\s*=\s*(?:::\s*)?at\s*;")
_NATIVE_AFTER = re.compile(r"(?<![\w:])\s*native\s*::\s*\w+|\b\w+\s*::\s*native\s*::\s*\w+")
ATEN_HEADER = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]\s*(ATen/native/[^>"\s]+)\s*[>"]', re.M)
ATEN_BUILDING_BLOCKS = frozenset({
    "ATen/native/cuda/block_reduce.cuh", "ATen/native/cuda/MemoryAccess.cuh", "ATen/native/cuda/KernelUtils.cuh",
    "ATen/native/cuda/thread_constants.h", "ATen/native/cuda/DeviceSqrt.cuh", "ATen/native/cuda/Math.cuh",
    "ATen/native/cuda/Loops.cuh", "ATen/native/cuda/CUDALoops.cuh", "ATen/native/cuda/JitLoops.cuh",
    "ATen/native/cuda/LaunchUtils.h", "ATen/native/cuda/MiscUtils.h", "ATen/native/Math.h",
    "ATen/native/SharedReduceOps.h", "ATen/native/TensorIterator.h", "ATen/native/DispatchStub.h",
    "ATen/native/Resize.h", "ATen/native/cuda/Resize.h", "ATen/native/TypeProperties.h",
    "ATen/native/cpu/AtomicAddFloat.h", "ATen/native/cpu/avx_mathfun.h", "ATen/native/cpu/utils.h",
    "ATen/native/cpu/Loops.h", "ATen/native/cpu/Intrinsics.h",
})
_DEFINED = re.compile(r"\b([A-Za-z_]\w*)\s*\([^;{}()]*(?:\([^;{}()]*\)[^;{}()]*)*\)\s*(?:const\s*)?(?:noexcept\s*)?"
                      r"(?:->\s*[\w:<>, ]+)?\{")
_NOT_FUNCTIONS = frozenset({"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype", "alignas",
                            "__launch_bounds__", "C10_LAUNCH_BOUNDS_1", "C10_LAUNCH_BOUNDS_2", "defined", "static_assert",
                            "operator", "__attribute__", "noexcept", "requires", "else", "do"})


@functools.lru_cache(maxsize=64)
def _header_functions(header: str) -> frozenset:
    """The functions a header of torch's own include directory defines (with a body), by name; empty where it is not
    there. The header read is the verifier's installed torch's, never a file the candidate names elsewhere."""
    import torch  # noqa: PLC0415 - only where a source includes an ATen/native header

    root = Path(torch.__file__).resolve().parent / "include"
    path = (root / header).resolve()
    if root not in path.parents or not path.is_file():
        return frozenset()
    text = strip_cxx(path.read_text(errors="replace"), strings=True)
    return frozenset(m.group(1) for m in _DEFINED.finditer(text)) - _NOT_FUNCTIONS


def aten_header_functions(sources: list[str], texts: list[str]) -> list[str]:
    """The functions of PyTorch's kernel-implementation headers (``ATEN_HEADER`` includes of the sources that are not
    ``ATEN_BUILDING_BLOCKS``) that the candidate's code calls unqualified (``name(`` or ``name<``) and does not define
    itself."""
    headers = sorted({m.group(1) for src in sources for m in ATEN_HEADER.finditer(strip_cxx(src))}
                     - ATEN_BUILDING_BLOCKS)
    if not headers:
        return []
    defined = set().union(*[_header_functions(h) for h in headers])
    own = {m.group(1) for text in texts for m in _DEFINED.finditer(text)}
    # unqualified calls (``std::max(`` and ``.max(`` are another's: a qualified at::native one is the pattern's above)
    called = {m.group(1) for text in texts for m in re.finditer(r"(?<![\w:.>])\s*\b([A-Za-z_]\w*)\s*[(<]", text)}
    return sorted((defined & called) - own)


# an ATen operator's kernel called by its backend's namespace (``at::cpu::mm``, ``at::cuda::_softmax``): below the
# dispatcher, where neither monitor sees it. The name must be an operator's: ``at::cuda::getCurrentCUDAStream``,
# ``at::cuda::CUDAGuard`` and the other device helpers are not. The binary shows the same call by its symbol
# (binary.py ``aten_entries``); the source shows it before any build, for an extension built where the binary could be
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


def strip_comments(src: str) -> str:
    return strip_cxx(src)

