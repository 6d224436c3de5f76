"""The candidate's own operators (PyTorch's custom-operator API: ``TORCH_LIBRARY`` in its C++, called as
``torch.ops.<namespace>.<op>``) and what else it registered with the dispatcher, seen from the execution child
(C02, C11).

An operator is the candidate's own when it appeared while one of the candidate's own extensions was loaded (the
child's ``load_inline``), in a namespace no operator had before the candidate was imported (not aten, prim, ``_``
or any namespace torch or a library already loaded has), and every registration the dispatcher keeps for it (its
schema, each kernel) names a file of the candidate's own build (under the build root or the job directory: the
``__FILE__`` of its ``TORCH_LIBRARY`` blocks). A call of one is a call of the candidate's extension (C02); what its
kernel dispatches inside is seen by the profiler, which observes nested operators (a dispatch mode does not: it
handles the outer call only), and judged as any other op of forward.

Anything else the candidate registers is tampering (C11): a kernel or schema of an operator that existed before
it was imported (aten's, prim's, the profiler's, a library's), an operator added to a namespace it did not create,
a backend fallback, and registrations made from outside its sources (a library linked into its extension, or
imported, registering into its namespace). ``Registry.changes`` lists them, compared with what the dispatcher had
before the import and the own operators as loaded: everything registered while its extension loaded counts, and
later a registration into an existing namespace counts where it names a file of the candidate's (its build, its
program): torch registers some kernels of its own lazily (a library loaded on first use).

What it does not see: a candidate that edits this object in memory (as for every record of the child: evidence,
checked outside where it can be); registrations under another operator's debug name (a kernel's file and line are
what the dispatcher was told). Imports: torch and the standard library.
"""

from __future__ import annotations

import contextlib
import os
import re

import torch

_REGISTERED_AT = re.compile(r"registered at (.+?):\d+(?= ::|\s*$)", re.M)
# namespaces whose operators the verifier's own code calls inside forward's window (``record_function``)
VERIFIER_NAMESPACES = frozenset({"profiler"})


def _namespace(op: str) -> str:
    return op.split("::", 1)[0]


class Registry:
    """The dispatcher's registrations as they were before the candidate was imported, the candidate's own
    operators as its extensions were loaded, and what else changed since (``changes``). The dispatcher's readers
    are bound when it is made: replacing them afterwards does not blind it."""

    def __init__(self, roots: list[str], programs: tuple[str, ...] = ("candidate.py",)):
        self._names = torch._C._dispatch_get_all_op_names
        self._dump = torch._C._dispatch_dump
        self._has_fallback = torch._C._dispatch_has_backend_fallback
        self._keys = [getattr(torch._C.DispatchKey, k) for k in torch._C.DispatchKey.__members__]
        self.roots = tuple(os.path.realpath(r) for r in roots if r)
        self.programs = frozenset(programs)  # the candidate's program as the child runs it (its file name)
        self.base = self._read()
        self.base_namespaces = {_namespace(op) for op in self.base}
        self.base_fallbacks = self._fallbacks()
        self.own: dict[str, str] = {}  # the candidate's own operators -> their registrations as loaded
        self.findings: list[str] = []  # registrations that are not the candidate's own, found while it loaded

    def _read(self) -> dict[str, str]:
        out = {}
        for op in self._names():
            try:
                out[op] = self._dump(op)
            except RuntimeError:  # an operator with no registration left: nothing to compare
                out[op] = ""
        return out

    def _fallbacks(self) -> set[str]:
        return {str(k) for k in self._keys if self._has_fallback(k)}

    def _from_own_build(self, text: str) -> bool:
        files = _REGISTERED_AT.findall(text)
        return bool(files) and all(os.path.realpath(f).startswith(tuple(r + os.sep for r in self.roots))
                                   for f in files)

    @contextlib.contextmanager
    def loading(self, so_path: str):
        """Around the load of one of the candidate's extensions: what appeared in a new namespace from the
        candidate's own sources is its own; anything else registered then is a finding."""
        before = self._read()
        try:
            yield
        finally:
            after = self._read()
            for op, text in after.items():
                if before.get(op) == text:
                    continue
                ns = _namespace(op)
                if ns in self.base_namespaces:
                    self.findings.append(f"registered `{op}` (an operator or namespace your program did not create)")
                elif not self._from_own_build(text):
                    where = ", ".join(sorted(set(_REGISTERED_AT.findall(text))))[:200] or "no file"
                    self.findings.append(f"operator `{op}` was registered from outside your extension's sources "
                                         f"({where}) while {os.path.basename(so_path)} loaded")
                else:
                    self.own[op] = text

    def adopt(self, op: str) -> None:
        """The verifier's own change to an own operator (a knockout run's kernel): its registrations now."""
        self.own[op] = self._dump(op)

    def own_namespaces(self) -> set[str]:
        return {_namespace(op) for op in self.own}

    def _candidates(self, text: str, old: str = "") -> bool:
        """Whether a registration in ``text`` that ``old`` does not have names a file of the candidate's: its build
        (the roots) or its program. torch registers some kernels lazily (a library of its own loaded on first use,
        a module imported on first call: files of its own), which are not the candidate's doing."""
        before = set(old.splitlines())
        files = [f for line in text.splitlines() if line not in before for f in _REGISTERED_AT.findall(line)]
        roots = tuple(r + os.sep for r in self.roots)
        return any(f in self.programs or os.path.realpath(f).startswith(roots) for f in files)

    def changes(self) -> list[str]:
        """Registrations that are not the candidate's own operators as loaded: the findings made while it loaded,
        then what changed since: an existing operator's kernels or schema, or an operator added to a namespace that
        existed before the import, from a file of the candidate's (its build, its program); an operator added to one
        of its own namespaces from outside its extension's load, an own operator's registrations changed, a backend
        fallback added (by anyone)."""
        found = list(self.findings)
        now = self._read()
        own_ns = self.own_namespaces()
        for op, text in now.items():
            if op in self.base:
                if text != self.base[op] and self._candidates(text, self.base[op]):
                    found.append(f"changed the registrations of `{op}` (an operator your program did not create)")
            elif op in self.own:
                if text != self.own[op]:
                    found.append(f"changed the registrations of your operator `{op}` after it was loaded")
            elif _namespace(op) in self.base_namespaces:
                if self._candidates(text):
                    found.append(f"added `{op}` to a namespace your program did not create")
            elif _namespace(op) in own_ns:
                found.append(f"`{op}` was added to your namespace from outside your extension's load")
        for key in sorted(self._fallbacks() - self.base_fallbacks):
            found.append(f"registered a backend fallback for {key}")
        return found

    def created(self, op: str) -> bool:
        """Whether ``op`` (a monitor's name, ``ns::op`` or ``ns::op.overload``) is in a namespace that did not exist
        before the candidate was imported: one of its own operators (C++, ``TORCH_LIBRARY``), or one its program
        defined in Python (``torch.library.custom_op``), whose body the profiler still sees op by op. An operator
        of a namespace that was there (aten, mkldnn, mkl, quantized, a library's) is PyTorch's or a library's, and an
        event that names no operator (a TorchScript fusion group) is nobody's creation."""
        return "::" in op and _namespace(op) not in self.base_namespaces

    def calls(self, ops) -> int:
        """How many of ``ops`` (names as the monitors record them, ``ns::op`` or ``ns::op.overload``) are calls
        of the candidate's own operators."""
        packets = {op.split(".", 1)[0] for op in self.own}
        return sum(1 for o in ops if o.split(".", 1)[0] in packets)
