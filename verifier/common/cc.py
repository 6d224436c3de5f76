"""The C compiler that builds the verifier's own small native libraries, loaded into execution children: the
knockout shim (verifier/judge/knockout.py) and the cpu sampler (verifier/judge/cpu_time.py).

Imports: the standard library only.
"""

from __future__ import annotations

import os
import shutil


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
