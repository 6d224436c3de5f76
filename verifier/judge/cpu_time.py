"""Where forward's CPU time went, on the cpu backend (the samples of verifier/child/sampler.py): how much of it ran
PyTorch's or a vendor library's compute kernels.

The op monitors see what passes the dispatcher; the binary scan sees what the extension imports. Neither sees the
candidate's C++ call a kernel of libtorch_cpu by an address it found itself (reading a loaded library's image in
memory from an allowed function's address, with no ELF name written): ``at::cpu::mm`` runs below the dispatcher,
on any thread. Its time does show: the sampler records where each half millisecond of every thread's CPU time was
spent during watched calls (each clocked bracket's apart), and here each sample in PyTorch's libraries is read against that library's own symbol table
(``.symtab``, else ``.dynsym``). A sample is compute when it falls in a BLAS / oneDNN / MKL library, or in a
function of libtorch whose name is ATen's kernels' (``at::native``, ``at::cpu``, ``cpublas``, MKL, gemm, oneDNN,
fbgemm, NNPACK) and not data movement (copies, fills, allocation) nor SLEEF's vector math (which an honest kernel
imports); a sample in libtorch that no symbol covers counts as compute too. The dispatcher, the profiler,
allocation, the candidate's own module, libgomp and Python are not compute; the C runtime's samples (libc) are left out
of the share, as overhead whoever computes.

``build(build_root)`` compiles the sampler once per source, compiler and machine (as the knockout shim is).
Imports: numpy, stdlib, verifier.common.ops, verifier.common.cc.
"""

from __future__ import annotations

import functools
import mmap
import os
import re
import struct
import subprocess
from pathlib import Path

import numpy as np

from verifier.common.cc import build_once
from verifier.common.ops import ALLOWED_ATEN

SOURCE = Path(__file__).parents[1] / "child" / "cpu_sampler.c"
SAMPLER_DIR = ".cpu_sampler"
# samples (each about half a millisecond of a thread's CPU time: verifier/child/sampler.py PERIOD_US) of one record
# (a trial's forward, every timed call together, one clocked bracket) below which no share is judged; a clocked
# bracket with fewer does not set the reported time (verifier/judge/checks.py check_bracket_samples)
MIN_SAMPLES = 5
# the share of the sampled time in PyTorch's or a vendor's compute above which forward's work is theirs
MAX_FOREIGN_SHARE = 0.5
# and the samples in that compute over a job's records together (its trials' forwards and its timed calls) at which
# PyTorch's compute is in forward whatever else forward does: at least MIN_FOREIGN_SAMPLES (about 2 ms of CPU time)
# and a quarter of the square root of all the job's samples (``foreign_count_limit``). A share alone was evaded by
# padding, PyTorch's kernel on every call beside ten times its time of the candidate's own loop (a share of 0.1): a
# pass with reward 1.0. A count grows with the work PyTorch does, a square root far slower than the padding that
# dilutes it (padding has to stretch a 2-sample call to ~500x to hide it); an honest forward's stray samples (a view's
# helper, a stub, 2 in 56,328 samples of the cpu suites' honest records once the PLT was told apart) grow with its
# length, below the root's quarter at any length a job can run (docs/ANTI_CHEAT.md class 112)
MIN_FOREIGN_SAMPLES = 4


def foreign_count_limit(total: int) -> float:
    """The samples in PyTorch's or a vendor's compute, of ``total`` samples of a job's records, that are its compute."""
    return max(MIN_FOREIGN_SAMPLES, total ** 0.5 / 4)

VENDOR_LIB = re.compile(r"(?i)(openblas|mkl|blas|lapack|dnnl|mkldnn|fbgemm|nnpack|xnnpack|gfortran|accelerate|"
                        # numpy's compute (its ufuncs, linalg, FFT), reached from C++ by a Python object handed in
                        r"_multiarray_umath|_umath_linalg|_pocketfft|lapack_lite)")
TORCH_LIB = re.compile(r"^libtorch_(cpu|cuda)[\w.-]*\.so")
# a vendor's kernels inside libtorch (MKL's packing and copies included), whatever else the name holds
VENDOR_NAME = re.compile(r"cpublas|mkl_|gemm|dnnl|mkldnn|fbgemm|nnpack|nnp_|qnnp|xnnpack|xnn_|pytorch_q|pocketfft")
# ATen's kernels, below the dispatcher: compute unless the name is data movement, allocation or SLEEF
ATEN_NAME = re.compile(r"2at6native|2at3cpu|2at24compositeexplicitautograd|2at24compositeimplicitautograd|2at4meta")
NOT_COMPUTE_NAME = re.compile(r"(?i)copy|fill|empty|resize|zero_|alloc|alias|sleef|contiguous|as_strided|cat_|stack|"
                              r"constant_pad")
# the functions named for an op forward may dispatch (views, allocation, copies: ``ops.ALLOWED_ATEN``), by the name's
# component in the mangled symbol (``4view``, ``7reshape``, not preceded by a digit); short names and the queries
# (``size``, ``numel``) are left out, as parts of many other names
_QUERIES = {"size", "stride", "numel", "item", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset"}
ALLOWED_OP_NAME = re.compile("(?<![0-9])(?:" + "|".join(re.escape(f"{len(n)}{n}") for n in sorted(ALLOWED_ATEN)
                                                        if len(n) >= 4 and n not in _QUERIES) + ")")


def sampler_for(backend: str, build_root) -> str:
    """The compiled sampler of forward's CPU time for a cpu job, or "" on cuda. A build that fails leaves the job
    without it: a candidate's records then hold no samples, which the judge does not count for it. The reference's
    timing job gets it too: the sampler's thread costs a watched call a few percent of a core, and with the candidate
    sampled alone its speedup read that much low."""
    if backend != "cpu":
        return ""
    try:
        return str(build(build_root))
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return ""


def build(build_root: Path) -> Path:
    """The compiled sampler under ``<build_root>/.cpu_sampler/<key>/`` (built once: ``cc.build_once``). Raises
    RuntimeError with the compiler's output."""
    try:
        return build_once(SOURCE, Path(build_root) / SAMPLER_DIR, "km_cpu_sampler")
    except RuntimeError as e:
        raise RuntimeError(f"building the cpu sampler failed {e}") from None


# the procedure linkage table: a library's stubs that jump to a function of another library (libtorch_cpu's calls of
# malloc, free, the C++ runtime), covered by no function symbol. A sample there is a call on its way out, never
# compute: the honest slow ReLU of tests/redteam/test_redteam_boundary.py (an allocation a call for 1.5 s) had 1 to 5
# samples a record in libtorch_cpu's .plt, all its samples in libtorch that no symbol covered
STUB_SECTIONS = (b".plt", b".plt.got", b".plt.sec", b".iplt")
STUB = "(a PLT stub)"

_SYM = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"),
                 ("size", "<u8")])


class _Symbols:
    """A library's function symbols (``.symtab`` and ``.dynsym``), sorted by address, and its loadable segments
    (to turn a file offset into an address)."""

    def __init__(self, path: str):
        self.values = np.zeros(0, dtype=np.uint64)
        self.ends = np.zeros(0, dtype=np.uint64)
        self.names: list[int] = []
        self.loads: list[tuple[int, int, int]] = []
        self.stubs: list[tuple[int, int]] = []  # the address ranges of its PLT sections (``STUB_SECTIONS``)
        self.data = None
        with open(path, "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            return
        self.data = data
        phoff, = struct.unpack_from("<Q", data, 0x20)
        shoff, = struct.unpack_from("<Q", data, 0x28)
        phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", data, 0x36)
        for i in range(phnum):
            ptype, _flags, poff, pvaddr, _paddr, pfilesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
            if ptype == 1:
                self.loads.append((poff, poff + pfilesz, pvaddr))
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
        if shstrndx < shnum:
            names_at = sections[shstrndx][4]
            for sname, _t, _fl, addr, _o, size, *_ in sections:
                end = data.find(b"\0", names_at + sname)
                if data[names_at + sname:end] in STUB_SECTIONS:
                    self.stubs.append((addr, addr + size))
        vals, ends, names = [], [], []
        for _n, stype, _fl, _a, soff, size, link, _inf, _al, entsize in sections:
            if stype not in (2, 11) or entsize != 24:  # SHT_SYMTAB, SHT_DYNSYM
                continue
            syms = np.frombuffer(data, dtype=_SYM, count=size // 24, offset=soff)
            funcs = syms[((syms["info"] & 0xF) == 2) & (syms["value"] != 0)]
            vals.append(funcs["value"])
            ends.append(funcs["value"] + np.maximum(funcs["size"], 1))
            names.append(funcs["name"].astype(np.uint64) + np.uint64(sections[link][4]))
        if vals:
            v, e, n = np.concatenate(vals), np.concatenate(ends), np.concatenate(names)
            order = np.argsort(v, kind="stable")
            self.values, self.ends, self.names = v[order], e[order], n[order].tolist()

    def address(self, offset: int) -> int | None:
        for lo, hi, vaddr in self.loads:
            if lo <= offset < hi:
                return offset - lo + vaddr
        return None

    def name_at(self, offset: int) -> str | None:
        """The (mangled) name of the function covering the file ``offset``, ``STUB`` in a PLT section, or None."""
        addr = self.address(offset)
        if addr is not None and any(lo <= addr < hi for lo, hi in self.stubs):
            return STUB
        if addr is None or not len(self.values):
            return None
        i = int(np.searchsorted(self.values, np.uint64(addr), side="right")) - 1
        # the covering symbol among those starting at or before addr (aliases share a start)
        while i >= 0 and int(self.values[i]) <= addr:
            if addr < int(self.ends[i]):
                at = int(self.names[i])
                end = self.data.find(b"\0", at)
                return self.data[at:end].decode("latin-1")
            if int(self.values[i]) + (1 << 20) < addr:
                break
            i -= 1
        return None


@functools.lru_cache(maxsize=8)
def _symbols(path: str, mtime_ns: int) -> _Symbols | None:
    try:
        return _Symbols(path)
    except (OSError, ValueError, struct.error):
        return None


def _kind(path: str, offset: str) -> tuple[bool, str]:
    """(compute?, what) of one sample's place."""
    base = os.path.basename(path)
    if VENDOR_LIB.search(base):
        return True, base
    if not TORCH_LIB.match(base):
        return False, base
    try:
        syms = _symbols(path, os.stat(path).st_mtime_ns)
        name = syms.name_at(int(offset, 16)) if syms is not None and offset != "*" else None
    except (OSError, ValueError):
        name = None
    if name is None:
        return True, f"{base} (no symbol)"
    if name == STUB:
        return False, f"{base} {STUB}"
    aten = ATEN_NAME.search(name) and not (NOT_COMPUTE_NAME.search(name) or ALLOWED_OP_NAME.search(name))
    return bool(VENDOR_NAME.search(name) or aten), name


# the C runtime (allocation, the poison written over freed memory, thread creation, page faults' returns) and the
# OpenMP runtime (its workers spinning at a barrier, between or after parallel regions: most of a loaded host's
# samples of a parallel kernel): the program's overhead whoever computes, left out of the share
C_RUNTIME = re.compile(r"^(libc[.-]|ld-linux|libpthread[.-]|libgomp[.-]|libiomp5[.-]|libomp[.-])")


def foreign_time(samples: dict) -> tuple[int, int, list[str]]:
    """(samples in PyTorch's or a vendor's compute, all samples but the C runtime's, the compute functions with most
    samples)."""
    total = int(samples.get("total", 0) or 0)
    at = samples.get("at") or {}
    foreign, where = 0, {}
    for key, count in at.items():
        path, _, offset = str(key).partition("|")
        if C_RUNTIME.match(os.path.basename(path)):
            total -= int(count)
            continue
        if path.startswith("<") or path.startswith("["):
            continue
        compute, what = _kind(path, offset or "0")
        if compute:
            foreign += int(count)
            where[what] = where.get(what, 0) + int(count)
    top = [w[:120] for w, _ in sorted(where.items(), key=lambda kv: -kv[1])[:3]]
    return foreign, total, top
