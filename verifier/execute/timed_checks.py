"""What the trusted harness checks of a clocked bracket's timed calls, in its own process after the clock stopped:
each call's outputs against the reference's answer for its inputs (``loose_problem``: loosely, did the call compute
this input's answer; a selection's index output read by its mark, verifier/common/ties.py), its inputs left as the
harness wrote them (``inputs_changed``), nothing written after ``done`` (``_late_writes``), and the few (inputs,
output) pairs kept for the judge's full, budgeted check (a reservoir over every timed call; on cpu also the calls
of the bracket whose time is reported, ``_keep_if_fastest``). On cuda the checks are held until the child has ended
(``DEFER_BYTES``), so that the reference's runs are not inside the child's exclusive hold of the device.

``TimedChecks`` is the part of ``verifier.execute.harness.Harness`` that does this (its clocking is harness.py): it
reads the harness's ``result`` (``Clocked``), ``check``, ``keep``, ``device``, ``_model_()``, ``_views(k)`` and
``_snapshot`` and keeps its own state (``_reset_checks``).
Imports: torch, the standard library and the verifier's torch-side modules only.
"""

from __future__ import annotations

import secrets
from typing import Callable

import torch

from verifier.common import ipc, ties
from verifier.common.inputs import nbytes, same_values

FASTEST_CHECKS = 64  # cpu: calls of the bracket whose time is reported that the judge checks in full
LOOSE_RTOL = {"float": 1e-2, "half": 5e-2}  # a timed output is checked to about this much per element here
LOOSE_SHARE = 0.01  # ... and wrong when more than this share of its elements are outside it
CHUNK = 1 << 26  # elements compared at a time
KEEP_BYTES = 2 << 30  # (inputs, output) pairs kept for the judge's full check: at most this much, at least one
# cuda: timed calls' (inputs, snapshot) held for their check until the child has ended, at most this many bytes: the
# reference's runs and the comparisons are then outside the child's exclusive hold of the device (brackets beyond
# it are checked as they end, as on cpu, where the cores are what a neighbour's timing needs)
DEFER_BYTES = {"cuda": 1 << 30, "cpu": 0}



def loose_problem(out: torch.Tensor, ref: torch.Tensor) -> str:
    """Why a timed output is not the answer for its input ("" when it is, to about 1% per element; an index output
    of a selection, marked by ``ties.reference_outputs``, with its choices among tied values taken as the reference's).
    """
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape or out.dtype != ref.dtype:
        return f"an output of shape {tuple(getattr(out, 'shape', ()))} where {tuple(ref.shape)} was expected"
    if not ref.numel():
        return ""
    out = ties.resolved(out, ref, ties.Loose(LOOSE_RTOL["float"]))[0]
    o, r = out.to(ref.device).reshape(-1), ref.reshape(-1)
    floating = r.is_floating_point() or r.is_complex()
    rtol = LOOSE_RTOL["half" if r.dtype in (torch.float16, torch.bfloat16) else "float"]
    scale = 0.0
    for k in range(0, r.numel(), CHUNK):  # in chunks: a KernelBench output can be 8 GiB
        part = r[k:k + CHUNK]
        if floating:
            finite = part.abs().nan_to_num(0.0, posinf=0.0, neginf=0.0)
            scale = max(scale, float(finite.max()) if finite.numel() else 0.0)
    bad = 0
    for k in range(0, r.numel(), CHUNK):
        a, b = o[k:k + CHUNK], r[k:k + CHUNK]
        ok = torch.isclose(a, b, rtol=rtol, atol=rtol * 1e-1 * scale + 1e-6, equal_nan=True) if floating else a == b
        bad += int((~ok).sum())
    return f"{bad} of {r.numel()} elements differ from the answer" if bad > LOOSE_SHARE * r.numel() else ""


class TimedChecks:
    """The checks of a bracket's timed calls (module docstring), mixed into ``Harness``."""

    def _reset_checks(self) -> None:
        self._snapshot: list[list[torch.Tensor]] = []
        self._mutated_labels: set[str] = set()  # labels with a timed call that changed its inputs (one note each)
        self._fastest: tuple[float, int] | None = None  # (time per call, calls) of the bracket kept in ``fastest``
        self._pending: list[tuple[str, list, list]] = []  # brackets' (label, inputs, snapshot) not checked yet
        self._pending_bytes = 0

    def _defer(self, label: str, private: list, outs: list) -> bool:
        """Hold a bracket's check until the child has ended (``close``) where its bytes fit ``DEFER_BYTES``; else the
        held ones are checked now, in order, and so is this one (False). A wrong timed output found later does not
        stop the timing early: the verdict is the same, the child runs its remaining brackets."""
        size = sum(nbytes(p) + nbytes(o) for p, o in zip(private, outs))
        if self._pending_bytes + size <= DEFER_BYTES[self.device]:
            self._pending.append((label, private, outs))
            self._pending_bytes += size
            return True
        self._check_pending()
        return False

    def _check_pending(self, give_way: Callable[[], object] = lambda: None) -> None:
        """The held brackets' checks, in the order they were clocked (the reservoir's picks stay uniform);
        ``give_way`` between two brackets' checks."""
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        for label, private, outs in pending:
            if self.result.problems:  # a wrong timed output has decided the verdict
                return
            give_way()
            self._check(label, private, outs)

    def _keep_if_fastest(self, calls: int, seconds: float, private: list, outs: list) -> None:
        """cpu: the reported time is the least bracket's (``Clocked.summary``), so one bracket decides it alone, and
        one bracket of approximate calls (right to the loose check's 1%) would set it. Its calls, up to
        ``FASTEST_CHECKS`` picked here after its clock, go to the judge's full check as the reservoir's picks do. A
        bracket of more calls replaces one of fewer: ``Clocked.samples`` counts only those of the most calls."""
        per = seconds / calls
        if self._fastest is not None and (calls < self._fastest[1] or (calls == self._fastest[1] and per >= self._fastest[0])):
            return
        self._fastest = (per, calls)
        picks = sorted(secrets.SystemRandom().sample(range(calls), min(calls, FASTEST_CHECKS)))
        room, kept = KEEP_BYTES, []
        for i in picks:
            size = nbytes(private[i]) + nbytes(outs[i])
            if kept and size > room:
                break
            kept.append((private[i], outs[i]))
            room -= size
        self.result.fastest = kept

    def _note_changed_inputs(self, label: str, flags: list) -> None:
        """The first call of this bracket whose inputs ``inputs_changed`` found changed (``flags``), if any (once per
        label: a caught label's later brackets are not compared)."""
        if not flags:
            return
        hits = torch.stack([f for _, _, f in flags]).nonzero().flatten().tolist()  # one read of the flags
        if hits:
            k, j, _ = flags[hits[0]]
            self._mutated_labels.add(label)
            self.result.mutated.append(f"timed call {k + 1} of a bracket ({label}): input {j}")

    def _check(self, label: str, private: list, outs: list) -> None:
        model = self._model_()
        for inp, got in zip(private, outs):
            self.result.calls_seen += 1
            with torch.no_grad():
                refs = [r for r in ties.reference_outputs(model, inp, self.mark_ties) if isinstance(r, torch.Tensor)]
            for j, (o, r) in enumerate(zip(got, refs)):
                why = loose_problem(o, r)
                if why:
                    self.result.problems.append(f"timed call {self.result.calls_seen} ({label}): output {j}: {why}")
                    return
            # reservoir sampling: every timed call equally likely to be among the kept, decided after its clock
            keep = max(1, min(self.keep, KEEP_BYTES // max(nbytes(inp) + nbytes(got), 1))) if self.keep else 0
            if len(self.result.kept) < keep:
                self.result.kept.append((inp, got))
            else:
                r = secrets.randbelow(self.result.calls_seen)
                if r < keep:
                    self.result.kept[r] = (inp, got)

    def _late_writes(self) -> None:
        """Outputs of the last bracket changed in the pool after its snapshot: written after ``done``."""
        if not self._snapshot or not self.check:
            return
        for k, snap in enumerate(self._snapshot):
            _, outs = self._views(k)
            if any(not same_values(a, b) for a, b in zip(outs, snap)):
                self.result.problems.append("outputs were written after the timed calls had reported done (work the "
                                            "clock did not see)")
                break
        self._snapshot = []


def inputs_changed(private: list, views: list) -> list[tuple[int, int, torch.Tensor]]:
    """(call, input, flag) for every tensor input of a bracket's calls: whether the pool's copy now differs from what
    this process wrote there before the gate opened, value by value as the child's own monitor compares a trial's
    inputs (``inputs.same_values``: NaN equals NaN, a NaN input left alone is not a change; -0.0 equals 0.0).
    The flags are tensors on the pool's device, queued on the current stream (read once, by ``Harness._note_changed_inputs``): a call that wrote into
    its inputs is seen here, outside the candidate's process, whatever its own monitors report."""
    flags = []
    for k, (inp, (ins, _)) in enumerate(zip(private, views)):
        for j, (x, dst) in enumerate(zip(inp, ins)):
            pairs = list(zip(ipc.value_tensors(x), dst)) if isinstance(dst, list) else \
                [(x, dst)] if dst is not None and isinstance(x, torch.Tensor) else []
            for a, b in pairs:
                if a.numel() == 0:
                    continue
                ne = b != a.to(b.device)
                if b.is_floating_point() or b.is_complex():
                    ne &= ~(torch.isnan(b) & torch.isnan(a.to(b.device)))
                flags.append((k, j, ne.any()))
    return flags
