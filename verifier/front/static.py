"""Stage 2, static legality: an AST scan of the candidate, and the static resolution of its
``load_inline`` calls (so the compile pool can build them before anything of the candidate runs).

What the scan guarantees: every finding names a cheat code (verifier/cheats.py), the line and the
construct; it never fails on the candidate's Python (any internal failure is a :class:`StaticScanError`
for that candidate, a verifier fault). What it does not: Python is dynamic, so compute reached through a name
bound at run time (``f = getattr(torch, name)`` called later) passes this stage; the runtime dispatch check in the
execution child is the backstop for every compute rule here. Reflection (``getattr``/``setattr``, ``__dict__``,
``vars``) is judged by what it does and on whose object (verifier/front/static_tamper.py): writes to what is not the
candidate's are C11, reads of its own objects are not findings.

What it reads as the candidate's forward: ``ModelNew`` is the class the module-level name binds (``class
ModelNew`` or ``ModelNew = Model``, extract.model_new_binding), with the program's classes it inherits from. The
compute rules (C01, and C04's ``Model(...)``) apply to code that can run: module-level code, ModelNew, and the
functions and classes that live code names (transitively); a class or function nothing names (the reference kept
next to the answer, a test helper, a ``__main__`` block) is not scanned for them. PyTorch compute that only
construction or the import runs (parameter initialisation, a module-level table) is set-up, not forward's work, while
what builds code for forward to run (``torch.compile``, ``torch.jit.script``) is C01 wherever it is built; torch calls
that only query state (the thread count, a backend's availability: static_rules ``TORCH_QUERIES``) compute nothing
anywhere. The other rules (reflection, files, processes...) apply everywhere but ``__main__`` blocks. An nn
container (Sequential, ModuleList, ModuleDict) is PyTorch compute only when a PyTorch layer is among its members.

Rules judge what the code does, not what it imports (issue 47): threading, shutil, pathlib, tempfile and site are
judged by the names used of them (``USE_JUDGED``: a lock, ``shutil.which``, a path's name, a temporary directory for
the build are honest; a thread, ``rmtree``, a file read or written through a path, a temporary file are not); a
try/except handler that calls the candidate's own kernels and nothing of PyTorch or the reference is not a fallback;
a side stream joined back to the current stream before the function returns is not side work
(static_streams.side_stream_hits); a tensor method's name is judged on its receiver (static_kinds.Kinds: a queue's
``put`` is not ``Tensor.put``); reading sys (``sys.stderr``, ``sys.executable``) is not patching it.
"""

from __future__ import annotations

import ast
import traceback
from pathlib import Path

from verifier import cheats
from verifier.front.static_judges import judge_node, judge_program
from verifier.front.static_literal import _is_load_inline
from verifier.front.static_program import Finding, Program, StaticReport

__all__ = ["Finding", "StaticReport", "StaticScanError", "scan"]


class StaticScanError(Exception):
    """The static stage itself failed on one candidate: a fault of the verifier, not of the candidate. Raised by
    :func:`scan` for any unexpected internal exception, with the candidate's problem described (the exception, the
    place in this module where it was raised); the caller makes it that candidate's ``verifier_error``."""


@cheats.probe(cheats.C01, cheats.C02, cheats.C03, cheats.C04, cheats.C09, cheats.C11, cheats.C12, cheats.C15, cheats.C17, cheats.C18, where="front")
def scan(code: str, backend: str = "cpu") -> StaticReport:
    """The static legality report of a candidate program (which must parse).

    Never fails on the candidate's Python: an unexpected exception inside the scan is the verifier's fault and
    comes out as :class:`StaticScanError` naming the exception and where it was raised."""
    try:
        return _scan(code, backend)
    except StaticScanError:
        raise
    except SyntaxError as e:
        raise StaticScanError(f"the static scan was given a program that does not parse (line {e.lineno}: "
                              f"{e.msg}); the extract stage should have stopped it") from e
    except Exception as e:  # noqa: BLE001 - the scan's own fault: one candidate's verifier_error, not a crash
        where = traceback.extract_tb(e.__traceback__)
        front = Path(__file__).resolve().parent  # the innermost frame in the front's own modules, whichever
        last = next((f for f in reversed(where) if Path(f.filename).resolve().parent == front),
                    where[-1] if where else None)
        at = f" at {Path(last.filename).name}:{last.lineno} in {last.name}" if last else ""
        raise StaticScanError(f"the static scan failed on this candidate: {type(e).__name__}: {e}{at}") from e


def _scan(code: str, backend: str = "cpu") -> StaticReport:
    """The findings of every rule over the program (``Program`` learns what the rules need first, static_judges
    holds the rules), one per (code, line, what)."""
    prog = Program(code)
    binding, tree = prog.binding, prog.tree
    if binding is not None and binding.reference_model:
        prog.add(cheats.C04, next((n for n in tree.body if getattr(n, "lineno", 0) == binding.line), tree),
                 f"`ModelNew` is bound to `{binding.alias}`, the reference `Model`")
    for macro, ns in prog.libraries.foreign:
        where = next((n for n in ast.walk(tree) if isinstance(n, ast.Call) and _is_load_inline(n)), tree)
        prog.add(cheats.C11, where, f"the C++ registers `{macro}({ns}, ...)`: operators or kernels in a "
                 "namespace it does not create (PyTorch's or another library's operators are not yours to "
                 "register into; create your own with TORCH_LIBRARY)")
    for top in prog.scope_nodes:
        for node in ast.walk(top):
            judge_node(prog, node)
    judge_program(prog)
    report = prog.report
    # one finding per (code, line, what)
    seen, unique = set(), []
    for f in report.findings:
        if (f.code, f.line, f.what) not in seen:
            seen.add((f.code, f.line, f.what))
            unique.append(f)
    report.findings = unique
    return report
