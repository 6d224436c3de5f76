"""A candidate runs from a string, as module ``km_candidate`` with ``__file__`` candidate.py (verifier/child/worker.py).
Code that reads its own source at import (``@triton.jit`` calls ``inspect.getsourcelines`` on the function it
decorates) must find it: a module-level Triton kernel beside the CUDA code crashed every such candidate at import
(issue 47). The GPU twin with real Triton is tests/gpu/redteam/test_redteam_fidelity_gpu.py."""

import inspect

from verifier.child.loading import exec_module

PROGRAM = '''
def jit(fn):  # what triton.jit does first: read the decorated function's source
    import inspect
    fn.src = inspect.getsource(fn)
    return fn


@jit
def add_one(x):
    return x + 1
'''


def test_a_program_reads_its_own_source_at_import():
    mod = exec_module("km_test_source", PROGRAM, "candidate_src_test.py")
    assert "return x + 1" in mod.add_one.src
    assert inspect.getsource(mod.add_one).startswith("@jit")
