"""The run's precompiled headers for the flag sets the whole suite builds with, made ahead of the tests that need them
(tests/conftest.py starts this script from pytest-xdist's controller when the whole suite runs).

A build does not wait for a header another process is making (verifier/build/pch.py ``ensure_pch(wait=False)``): it
compiles without it, which on the 2-core machine costs a C++-only extension about 33 CPU-s instead of 7.5. In the
suite at e514965 each of these sets was first asked for by a test's batch of builds (the fixtures' -O2 25 s into the
run, the OpenMP red-team extensions' at 778 s, the teacher's -O3 at 1,406 s), so the builds beside the one making the
header (the batch's other compile worker, the other test worker) went without it. Made here first, in the order the
suite first needs them, each under the header's own lock (a test that waits for one, ``fx.make_headers``, waits for
this process as it would for another test worker).

Only headers the suite's builds use: torch/extension.h's, the boxed binding's module object beside it and slim's
C++-only head (a C++-only build's host unit, the split_cpp variant); never slim's CUDA head under C++-only flags,
which only fails and takes one of the run's ``PCH_MAX_FLAG_SETS`` directories."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# the flags of the extensions the suite builds most (the cflags set is the header's key)
FLAG_SETS = (
    ["-O2"],  # bench/lib/fixtures.py's extensions: every honest fixture, most red-team modules
    [],  # KernelBench's template (extra_cflags=[""]) and extensions without flags
    ["-O2", "-fopenmp"],  # the OpenMP red-team extensions (boundary, side work, binary compute)
    ["-O3"],  # the offline teacher's candidates (synth/teacher/writer.py): every pipeline test's builds
)


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from verifier.build.pch import ensure_boxed_module, ensure_pch
    from verifier.build.slim import SLIM_CPU_HEADER
    from verifier.common.spec import canonical_spec

    root = Path(os.environ["KERNELMILL_VERIFY_PCH_DIR"])
    for flags in FLAG_SETS:
        spec = canonical_spec({"cpp_sources": "int f();", "functions": ["f"], "extra_cflags": flags})
        if ensure_pch(spec, root) is not None:
            ensure_boxed_module(spec, root)
            ensure_pch(spec, root, SLIM_CPU_HEADER)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
