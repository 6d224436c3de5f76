"""The scans of a built extension (cheats C01, C11): what it links and what it calls by name, however its source
spelled it, read from its ELF file (verifier/front/elf.py) outside the candidate's process.

``scan_library`` (C01): the libraries it links (an allowlist, ``LINKABLE``), the vendor libraries, ATen internals,
dynamic loading and symbol-table walks among the symbols it imports (``SYMBOL_PATTERNS``: a name the preprocessor
built still shows), and what it takes from PyTorch's compute libraries by name, which must be on an allowlist
(``TORCH_IMPORT_ALLOWED``; ``taken_from_torch`` asks which loaded PyTorch library defines a name, by ``dlsym`` /
``dladdr`` in this process). ``scan_tampering`` (C11): C++ that switches off the monitors, changes global backend
state or reaches Python objects, in the sources (the patterns of verifier/front/vendor.py, as written and with the
candidate's macros expanded) and in the binary's imports (``TAMPER_SYMBOL``, ``PYTHON_FROM_CXX``). ``aten_entries``:
the ATen operators it calls through the dispatcher and below it. ``scan_binary`` runs them all over the builds of a
candidate (``BinaryScan``).

What it guarantees: the binary is read, never loaded; only the verifier's process is asked which library defines a
name, and only libraries PyTorch already loaded there are asked (nothing new is loaded). Honest look-alikes that must
pass: the dlopen / dlsym that CUDA 13's CCCL headers (cub, thrust) import into any module that includes them, the
dispatch-key TLS of ``c10::InferenceMode``'s inline guard, and the C API that pybind11 imports for itself. What it
does not: code the module defines itself (a library linked statically is the source scan's finding, by its link
flags), a function fetched by a name built at run time (the ``dlopen`` / ``dlsym`` import is flagged, not what it
fetched), or which exported function reaches an import: an import counts whether forward calls it or not.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from verifier import cheats
from verifier.front.elf import imported_symbols, needed_libraries
from verifier.front.vendor import (PYTHON_SOURCE, TAMPER_SOURCE, inference_mode_only, strip_comments, expanded,
                               code_text, own_names, without_module_constants,
                                   strip_cxx)

# C++ that blinds what watches forward or changes global backend state (verifier/front/vendor.py ``TAMPER_SOURCE``),
# by the names the built binary imports (C++ names mangled): cheat C11
TAMPER_SYMBOL = re.compile(rb"^(cupti\w+|cudaProfilerStop|cuProfilerStop|_ZN2at\d*enableRecordFunction\w*|"
                           rb"_ZN2at\d*set_record_function_tls_\w*|_ZN2at\d*clearCallbacks\w*|"
                           rb"_ZN2at\d*removeCallback\w*|_ZN3c104impl\d*tls_set_dispatch_key_\w+|"
                           rb"_ZN3c104impl\d*_force_tls_local_dispatch_key_set\w*|_ZN2at7Context\d*set\w+|"
                           rb"_ZN2at\d+add(?:Global|ThreadLocal)Callback\w*|_ZN2at\d+get_record_function_tls_\w*|"
                           rb"_ZN3c104impl\d+raw_local_dispatch_key_set\w*|_ZN3c10\d+Set(?:CPU)?Allocator\w*|"
                           rb"_ZN3c1010Dispatcher\d+addRegistrationListener\w*|"
                           # the cpu sampler's signal and timer (verifier/child/sampler.py): its handler replaced,
                           # its signal blocked on a thread, its timer reset
                           rb"sigaction|signal|sigprocmask|pthread_sigmask|sigsetmask|sigblock|sighold|sigset|"
                           rb"bsd_signal|sysv_signal|__sysv_signal|setitimer|timer_create|timer_settime)(@\w+)?$")

# the dispatch-key TLS that ``c10::InferenceMode``'s inline guard imports into any module that uses it: let through
# where the sources the binary was built from name the guard, spell none of the TLS routes and rename nothing with an
# asm label (verifier/front/vendor.py ``inference_mode_only``, which says why)
_GUARD_TLS = re.compile(rb"^_ZN3c104impl\d+(?:raw_local_dispatch_key_set|_force_tls_local_dispatch_key_set)\w*(@\w+)?$")


def _own_name(text: str, m, own: frozenset) -> bool:
    """The match ``m`` of ``PYTHON_SOURCE`` is a bare name the candidate's sources define themselves (a function
    ``PyTorch_gelu``, a variable ``tp_base``): its own code, not the C API's. A slot read through an object
    (``->tp_dict``, ``.tp_call``) is never one."""
    word = m.group(0).strip()
    before = text[max(0, m.start() - 3):m.start()].rstrip()
    return word in own and not before.endswith((".", "->", "::"))


@cheats.probe(cheats.C11, where="front")
def scan_tampering(sources: list[str], so_path: str | Path | None = None, built_from: list[str] | tuple = ()) -> list[str]:
    """Findings of C++ that switches off the runtime monitors, changes global backend state or reaches Python
    objects (C11), in the sources as written and with the candidate's own macros expanded (``expanded``), and in the
    symbols the built extension ``so_path`` imports (``built_from``: the sources it was built from, which say whether
    its dispatch-key TLS imports are those of ``c10::InferenceMode``'s inline guard: ``inference_mode_only``)."""
    found = []
    for src in sources:
        m = TAMPER_SOURCE.search(strip_comments(src)) or TAMPER_SOURCE.search(expanded(src))
        if m:
            found.append(f"the C++/CUDA source switches off what watches it or changes global state (`{m.group(0)}`)")
            break
    # every spelling found (the first few), as written and as the candidate's macros expand it
    texts = [without_module_constants(t) for src in sources for t in (strip_comments(src), expanded(src))]
    own = own_names([code_text(src) for src in sources])
    routes = list(dict.fromkeys(" ".join(m.group(0).split()) for t in texts for m in PYTHON_SOURCE.finditer(t)
                                if not _own_name(t, m, own)))
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
        guard_only = inference_mode_only(built_from)
        for sym in imported_symbols(so_path):
            if TAMPER_SYMBOL.match(sym) and not (guard_only and _GUARD_TLS.match(sym)):
                found.append(f"the built extension imports `{sym.decode(errors='replace')[:80]}` (monitor or global "
                             "state control)")
                break
    return found


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
    rb"_ZNK?2at(?:10TensorBase|6Tensor|9TensorArg)(?:C[12]|D[012]|\d)", rb"_ZT[VIS]N2at(?:6Tensor|10TensorBase|14TensorIterator|18TensorIteratorBase)E",
    rb"_ZNK?2at(?:14TensorIterator|18TensorIteratorBase|20TensorIteratorConfig)(?:C[12]|D[012]|\d)",
    rb"_ZNK?2at\d+check[A-Z_]\w*?E",
    # a tensor over memory the caller owns (``torch::from_blob``, ``at::for_blob``: at::TensorMaker), allocation only;
    # a profiler range around the extension's own work (``RECORD_FUNCTION``), which makes it more visible, not less
    rb"_ZNK?2at11TensorMaker(?:C[12]|D[012]|\d)", rb"_ZNK?2at14RecordFunction(?:C[12]|D[012]|\d)",
    rb"_ZN2at\d+(?:has_internal_overlap|assert_no_internal_overlap|assert_no_partial_overlap|assert_no_overlap|"
    rb"get_overlap_status)E",
    rb"_ZNK?2at6detail", rb"_ZNK?2at8internal", rb"_ZNK?2at3vec",
    # shape and dtype arithmetic on sizes, strides and scalar types, no tensor read (ATen/ExpandUtils.h's broadcast
    # shape, which ``at::expand_outplace`` calls; the accumulator's dtype); the thread pool's description
    rb"_ZN2at\d+(?:infer_size(?:_dimvector|_symdimvector|_symint)?|inferExpandGeometry(?:_dimvector)?|"
    rb"infer_dense_strides|toAccumulateType)E", rb"_ZN2at17get_parallel_infoB",
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
    # autograd's bookkeeping (a custom Function's node, saved variables, metadata), not what runs a graph: the
    # generated backward nodes (``MmBackward0``: its ``apply`` is ``A.mm(B)`` inside libtorch, reached by its
    # vtable), the autograd kernels of the operators (``VariableType``), the engine, ``backward`` and ``grad``
    rb"_ZT[VIS]N5torch8autograd(?!8profiler|9generated|9functions|12VariableType|6Engine)",
    rb"_ZNK?5torch8autograd(?!8profiler|9generated|9functions|12VariableType|6Engine|8backwardE|4gradE)",
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


# What an extension may link: the C and C++ runtimes, OpenMP and TBB, PyTorch's own libraries, Python, and the CUDA
# runtime, driver, NVRTC and NVTX (CUDA's compute libraries are allowed to link here: what the module imports from
# them is judged by SYMBOL_PATTERNS). Any other library is code that is not the candidate's kernel (numpy's
# OpenBLAS linked by path, a BLAS or FFT library of the system): deny by default.
# libmvec: glibc's vector forms of libm's functions, which GCC calls for a loop of expf/logf/sinf under -O3 -ffast-math
# (the flags frontier models put on CPU answers): libm's code, as the scalar calls are (an honest softplus was C01)
LINKABLE = re.compile(r"^(?:lib(?:c|m|mvec|dl|rt|pthread|util|stdc\+\+|gcc_s|atomic|gomp|omp|iomp5|tbb\w*|c10\w*|torch\w*|shm|"
                      r"cudart|cuda|nvrtc[\w-]*|nvToolsExt|nvtx\w*|cublas\w*|cudnn\w*|cusparse\w*|cufft\w*|cusolver\w*|"
                      r"curand|python3[\w.]*)|ld-linux[\w.-]*)\.so(?:\.[\w.]+)?$")


@cheats.probe(cheats.C01, where="binary")
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
