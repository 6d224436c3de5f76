"""Vendor-library and ATen compute reached from a candidate's own C++/CUDA (cheat C01).

The runtime dispatch monitors see ATen ops that go through the dispatcher. They do not see a candidate
whose C++ calls cuBLAS, cuBLASLt, cuDNN, CUTLASS, oneDNN / MKL / BLAS, or ATen's internal kernels
(``at::native::``, ``at::cuda::blas::``) directly. Three independent checks catch that:

1. ``scan_sources``: the candidate's C++/CUDA source text (includes, calls, handles, link flags);
2. ``scan_library``: the dynamic symbols the built extension imports (an ELF's dynamic string table lists
   every function it links to by name, so a call the source hid behind macros still shows; a ``dlopen`` /
   ``dlsym`` pair that would fetch a library by a built-up string is flagged too);
3. at run time on cuda, the share of forward device time spent in kernels named in the candidate's sources
   (verifier/worker.py, judged in verifier/judge.py): a cuBLAS or cuDNN kernel shows by name.

Each finding names the library. Honest look-alikes that must pass: allocation and stream helpers
(``at::cuda::getCurrentCUDAStream``, ``torch::empty``), ``cub``/``thrust`` primitives are not flagged here
(header-only building blocks compiled into the candidate's own kernels).
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

# (library, pattern over source text)
SOURCE_PATTERNS = [
    ("cuBLAS", re.compile(r"\bcublas\w*|getCurrentCUDABlas(Lt)?Handle|\bat::cuda::blas\b|cublas_v2\.h|cublasLt\.h")),
    ("cuDNN", re.compile(r"\bcudnn\w*|cudnn\.h|\bat::native::cudnn")),
    ("CUTLASS", re.compile(r"#\s*include\s*[<\"](cutlass|cute)/|\bcutlass::|\bcute::")),
    ("cuSPARSE/cuFFT/cuSOLVER", re.compile(r"\bcusparse\w+|\bcufft\w+|\bcusolver\w+")),
    ("BLAS/MKL/oneDNN", re.compile(r"\bcblas_\w+|\bmkl_\w+|\bdnnl(::|_)\w*|\bmkldnn\w*|\bsgemm_\s*\(|\bat::native::cpublas|"
                                   r"\bat::cpublas\b")),
    ("ATen internals", re.compile(r"\bat::native::\w+|\bat::redispatch::\w+|::redispatch\s*\(")),
    ("dynamic loading", re.compile(r"\bdlopen\s*\(|\bdlsym\s*\(")),
]
# C++ that blinds what watches forward (the dispatcher's observers, the Python dispatch key, the profiler,
# CUPTI) or changes global backend state: cheat C11 wherever it appears in the sources or the built binary
TAMPER_SOURCE = re.compile(
    r"\b(enableRecordFunction|RecordFunctionGuard|DisableRecordFunctionGuard|RecordFunctionTLS|"
    r"set_record_function_tls_|clearCallbacks|removeCallback|ExcludeDispatchKeyGuard|IncludeDispatchKeyGuard|"
    r"tls_set_dispatch_key_excluded|tls_set_dispatch_key_included|_force_tls_local_dispatch_key_set|"
    r"DisableTorchDispatch|PythonDispatcherTLS|PythonTorchFunctionTLS|DisablePythonDispatcher|"
    r"cupti\w*|cudaProfilerStop|cuProfilerStop|autograd::profiler|torch::profiler|"
    r"globalContext\s*\(\s*\)\s*\.\s*set\w+)\b")
TAMPER_SYMBOL = re.compile(rb"^(cupti\w+|cudaProfilerStop|cuProfilerStop|_ZN2at\d*enableRecordFunction\w*|"
                           rb"_ZN2at\d*set_record_function_tls_\w*|_ZN2at\d*clearCallbacks\w*|"
                           rb"_ZN2at\d*removeCallback\w*|_ZN3c104impl\d*tls_set_dispatch_key_\w+|"
                           rb"_ZN3c104impl\d*_force_tls_local_dispatch_key_set\w*|_ZN2at7Context\d*set\w+)(@\w+)?$")


def scan_tampering(sources: list[str], so_path: str | Path | None = None) -> list[str]:
    """Findings of C++ that switches off the runtime monitors or changes global backend state (C11)."""
    found = []
    for src in sources:
        m = TAMPER_SOURCE.search(_strip_comments(src))
        if m:
            found.append(f"the C++/CUDA source switches off what watches it or changes global state (`{m.group(0)}`)")
            break
    if so_path:
        for sym in imported_symbols(so_path):
            if TAMPER_SYMBOL.match(sym):
                found.append(f"the built extension imports `{sym.decode(errors='replace')[:80]}` (monitor or global "
                             "state control)")
                break
    return found


LINK_PATTERN = re.compile(r"-l\s*(cublas\w*|cudnn\w*|cusparse\w*|cufft\w*|cusolver\w*|mkl\w*|openblas|blas|dnnl)")

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
]
def scan_sources(sources: list[str], link_flags: list[str] | None = None) -> list[str]:
    """Findings in the candidate's C++/CUDA sources and link flags, each naming the library and the text."""
    found = []
    for lib, pat in SOURCE_PATTERNS:
        for src in sources:
            m = pat.search(_strip_comments(src))
            if m:
                found.append(f"the C++/CUDA source uses {lib} (`{m.group(0).strip()}`)")
                break
    for flag in link_flags or []:
        m = LINK_PATTERN.search(str(flag))
        if m:
            found.append(f"links against `{m.group(1)}` (extra_ldflags)")
    return found


def _strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", " ", src)


def imported_symbols(so_path: str | Path) -> list[bytes]:
    """The undefined (imported) dynamic symbols of an ELF shared object; [] when it cannot be read.

    A minimal reader of .dynsym/.dynstr (64-bit little-endian ELF, what the compilers here produce): no
    binutils, no third-party package, so it runs wherever the verifier runs."""
    try:
        data = Path(so_path).read_bytes()
    except OSError:
        return []
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, _ = struct.unpack_from("<HHH", data, 0x3A)
    sections = []
    for i in range(shnum):
        off = shoff + i * shentsize
        _name, stype, _flags, _addr, soff, size, link, _info, _align, entsize = \
            struct.unpack_from("<IIQQQQIIQQ", data, off)
        sections.append((stype, soff, size, link, entsize))
    out = []
    for stype, soff, size, link, entsize in sections:
        if stype != 11 or not entsize:  # SHT_DYNSYM
            continue
        str_off = sections[link][1]
        for j in range(size // entsize):
            st_name, _st_info, _other, st_shndx, _value, _size = struct.unpack_from("<IBBHQQ", data, soff + j * entsize)
            if st_shndx != 0 or not st_name:  # defined here, or the null symbol
                continue
            end = data.index(b"\0", str_off + st_name)
            out.append(data[str_off + st_name:end])
    return out


def scan_library(so_path: str | Path) -> list[str]:
    """Findings in the symbols a built extension imports, each naming the library and one symbol."""
    found: dict[str, bytes] = {}
    for sym in imported_symbols(so_path):
        for lib, pat in SYMBOL_PATTERNS:
            if lib in found or not pat.match(sym):
                continue
            found[lib] = sym
    return [f"the built extension imports {lib} (`{sym.decode(errors='replace')[:80]}`)" for lib, sym in found.items()]
