"""The C compiler that builds the verifier's own small native libraries, loaded into execution children: the
knockout shim (verifier/judge/knockout.py) and the cpu sampler (verifier/judge/cpu_time.py).

Imports: the standard library only.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
from pathlib import Path


class NoCompiler(RuntimeError):
    """No C compiler on PATH."""


def c_compiler() -> list[str]:
    """The command that compiles C: ``$CC``, else cc, gcc or clang, else the C++ compiler told the language."""
    for cc in (os.environ.get("CC", ""), "cc", "gcc", "clang"):
        path = shutil.which(cc) if cc else None
        if path:
            return [path]
    cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
    if cxx:
        return [cxx, "-x", "c"]
    raise NoCompiler("no C compiler (cc, gcc, clang, c++) on PATH")


def build_once(source: Path, out_root: Path, name: str, extra: tuple[str, ...] = ()) -> Path:
    """``source`` compiled to ``lib<name>.so`` once per source, compiler and machine, under
    ``<out_root>/<key>/`` (a file lock keeps concurrent verifiers from building it twice). Raises NoCompiler, or
    RuntimeError with the compiler's command and output."""
    cc = c_compiler()
    key = hashlib.sha256(source.read_bytes() + "\0".join(cc + [platform.machine()]).encode()).hexdigest()[:16]
    out_dir = Path(out_root) / key
    lib = out_dir / f"lib{name}.so"
    if lib.is_file():
        return lib
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if lib.is_file():
            return lib
        tmp = out_dir / f"lib{name}.{os.getpid()}.tmp"
        cmd = cc + ["-O2", "-shared", "-fPIC", "-o", str(tmp), str(source), *extra]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise RuntimeError(f"({' '.join(cmd)}): {done.stderr.strip()[:800]}")
        os.replace(tmp, lib)
    return lib
