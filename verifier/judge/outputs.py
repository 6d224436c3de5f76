"""The output checks: a candidate's outputs against the reference, and the cheats its outputs give away.

Runs in the verifier's process, never in the execution child. ``check_outputs`` judges one correctness trial:
the outputs the child saved against reference outputs computed here on inputs drawn here from the trial's seed
(the child never sees them), within the tolerance of verifier/judge/numerics.py (measured from a float64 run of the
reference, ``reference64``). What the outputs reveal is named as it is found: C06 (an output nothing wrote: it
still holds the poison pattern, ``poisoned``), C05 (an input, a constant or zeros), C08 (an earlier call's output
again, by ``fingerprint``), C13 (fp32 computed at lower precision: errors with the signature of fewer mantissa
bits, lowering.looks_lowered; a plain wrong answer is no code), C11 (the reference computed differently inside
the candidate's process: its digest, sums of the outputs, ``inputs.digests_match``; the child keeps no reference
output, only its digest). ``check_clocked_outputs`` judges the timed
calls the harness read back (C16: verifier/execute/harness.py). ``reference_fault`` says when the task's own reference output does not depend
on its inputs (a task_error). Both add cheat codes and feedback sentences to an ``Evidence``, which judge.py's
other checks fill too (``check_outputs`` also says whether every output matched); the verdict is decided in
judge.py.

Guarantees: an output of any size is compared, in pieces of ``CHUNK`` elements (no float64 copy of a
several-GB output is made at once). Not guaranteed: an output within the tolerance is correct however it was
made (a constant or repeated output that matches is no cheat); C08 compares fingerprints (shape, sum and 4096
sampled elements), so a wrong output that differs from an earlier one only between the samples, with the same
sum, counts as repeated; a repeated wrong output that is the same for every sample (along the first dimension, where
the reference's differ) and repeats no earlier right answer is a model whose output does not depend on its input,
judged wrong with that said, not C08 (``same_for_every_sample``); C06 on cpu needs glibc's poisoning (outputs over 32 MiB come from zero pages).
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import torch

from verifier import cheats
from verifier.common.config import VerifyConfig
from verifier.common.inputs import cpu_model, digests_match, same_value
from verifier.common.ties import (Pooled, Selection, Threshold, Unordered, aligned, as_index, picked, pooled_picks,
                                  reference_outputs, resolved, selection_of)
from verifier.judge import feedback
from verifier.judge.lowering import error_follows_inputs, looks_lowered
from verifier.judge.numerics import CHUNK as NUMERICS_CHUNK
from verifier.judge.budgets import budget_for
from verifier.judge.numerics import LOW_PRECISION, Budget, float64_model, real_view, real_views, widen
from verifier.judge.reduction import ReductionTracker, RefStats

CHUNK = NUMERICS_CHUNK  # elements compared at a time (verifier/judge/numerics.py): outputs of several GB in pieces

# torch's global generators are shared by the execution threads of verify_batch: a seed and the draws it
# must determine happen under this lock, or a concurrent candidate's draws land in between (here because
# the harness draws inputs in the channel's thread; judge.py and engine.py take it too)
RNG_LOCK = threading.RLock()


# the job's reference as constructed on the cpu, kept while the job runs (forget_reference): its harness, its
# prefetch and its judge each take a copy of it, not a construction of their own (the weights' draws of a large
# level-3 network take seconds of host time, and each was made holding the device, or inside a timing window)
_PRISTINE: OrderedDict = OrderedDict()
PRISTINE_KEEP = 4  # the models kept at most (a slot's jobs end with forget_reference; this bounds the rest)


def _pristine_key(plan, job, cfg: VerifyConfig) -> tuple:
    return plan.text, job.init_seed, cfg.eval_mode


def construct_reference(plan, job, cfg: VerifyConfig) -> torch.nn.Module:
    """The job's reference constructed on the cpu from its init seed, under RNG_LOCK (the global generator): the one
    construction every copy is made from, and a caller that uses the reference once (a knockout) takes it as is."""
    with RNG_LOCK:
        return cpu_model(plan.ref_mod, job.init_seed, plan.text, cfg.eval_mode)[0]


def pristine_reference(plan, job, cfg: VerifyConfig) -> torch.nn.Module:
    """The job's reference constructed on the cpu from its init seed (under RNG_LOCK: the global generator), once
    per job in this process; the one kept, which nobody runs (``reference_cpu`` hands out copies)."""
    key = _pristine_key(plan, job, cfg)
    with RNG_LOCK:
        model = _PRISTINE.get(key)
        if model is None:
            model = _PRISTINE[key] = construct_reference(plan, job, cfg)
            while len(_PRISTINE) > PRISTINE_KEEP:
                _PRISTINE.popitem(last=False)
        else:
            _PRISTINE.move_to_end(key)
        return model


def reference_cpu(plan, job, cfg: VerifyConfig) -> torch.nn.Module:
    """A fresh copy of the job's reference on the cpu (host work: no hold on the device needed), its weights those
    the child's reference and a construction here draw from the init seed. A model that cannot be copied is
    constructed again."""
    model = pristine_reference(plan, job, cfg)
    try:
        return copy.deepcopy(model)
    except Exception:  # noqa: BLE001 - an attribute deepcopy cannot take: constructed as before
        return construct_reference(plan, job, cfg)


def warm_reference(plan, job, cfg: VerifyConfig) -> None:
    """The job's reference constructed on a thread of its own as the job starts, while the child starts and runs its
    first trials: the first bracket's set-up (inside the child's timing window) copies it, not constructs it."""
    def build() -> None:
        try:
            pristine_reference(plan, job, cfg)
        except Exception:  # noqa: BLE001 - whoever needs it constructs it again and meets the error itself
            pass

    threading.Thread(target=build, name="km-reference-warm", daemon=True).start()


def forget_reference(plan, job, cfg: VerifyConfig) -> None:
    """The job is over: its kept reference goes."""
    with RNG_LOCK:
        _PRISTINE.pop(_pristine_key(plan, job, cfg), None)


def reference_models(plan, job, device: str, cfg: VerifyConfig, cpu: torch.nn.Module | None = None) -> tuple:
    """The reference a job is judged against, from its init seed, and its float64 copy: None where the plan fixes
    the tolerance (``plan.float64`` says why), or where the copy does not fit in memory (that candidate is then
    judged with the fixed tolerance). The judge and its prefetch both build them here, so the answers one computes
    are the other's. ``cpu``: the model from ``reference_cpu``, taken before the caller's hold on the device (only
    the copy to the device is device work)."""
    model = (cpu if cpu is not None else reference_cpu(plan, job, cfg)).to(device)
    model64 = None
    if not plan.float64:
        try:
            model64 = float64_model(model)
        except Exception:  # noqa: BLE001 - memory: the fixed tolerance, as the docstring says
            model64 = None
    return model, model64


@dataclass
class Evidence:
    """What the probes found so far: cheat codes sighted, feedback sentences, forbidden ops. The codes a verdict
    lists are decided from it by the catalogue's checks (``seen``, ``decide``; verifier/cheats.py)."""

    codes: set = field(default_factory=set)
    details: list = field(default_factory=list)
    fallback_ops: set = field(default_factory=set)
    # PyTorch compute in forward: a cheat under the strict legality policy only (KernelBench's partial policy
    # allows it beside the candidate's own kernels), kept apart so every verdict can say what both policies say
    torch_codes: set = field(default_factory=set)
    # cpu: forward's CPU-time samples in PyTorch's or a vendor's compute over the records read so far (each trial's,
    # the timed calls'), with the compute functions named (verifier/judge/checks.py ``check_trial_runtime``)
    foreign_samples: int = 0
    sampled: int = 0  # all the samples of those records (the C and OpenMP runtimes' left out)
    foreign_where: dict = field(default_factory=dict)
    foreign_said: bool = False

    def add(self, code: str | None, sentence: str) -> None:
        if code:
            self.codes.add(code)
        self.details.append(sentence)

    def add_torch(self, code: str, sentence: str) -> None:
        self.torch_codes.add(code)
        self.details.append(sentence)

    def seen(self, legality: str = "strict", torch_found: bool = False, partial_ok: bool | None = None) -> cheats.Seen:
        """What the probes saw so far, for the catalogue's checks (``cheats.decide``)."""
        return cheats.Seen(frozenset(self.codes), frozenset(self.torch_codes), torch_found, partial_ok, legality)

    def decide(self, torch: bool = True) -> list[str]:
        """The codes that fire where the candidate stops before the legality policies are read: the strict reading
        of what was seen, so that PyTorch compute a monitor saw run is named beside the cheat that stopped it;
        ``torch=False`` leaves that compute out (a verdict a crash, a timeout or a wrong answer decides)."""
        return cheats.decide(self.seen() if torch else cheats.Seen(frozenset(self.codes)))


@dataclass
class Digest:
    """The digests (inputs.digest) of the reference computed in the child, before or after the candidate ran."""
    values: list


def poisoned(t: torch.Tensor, byte: int) -> int:
    """How many elements of t hold the poison pattern in every byte."""
    if t.numel() == 0 or not t.is_contiguous():
        return 0
    b = t.reshape(-1).view(torch.uint8).reshape(t.numel(), t.element_size())  # reshape: 0-d outputs too
    return int((b == byte).all(dim=1).sum())


def compare(o: torch.Tensor, truth: torch.Tensor, budget: Budget) -> dict:
    """The account of one output against its budget (per element, verifier/judge/numerics.py: n_bad, max_abs, max_rel,
    the first mismatch, as feedback.describe_mismatch reads it), over the whole tensor in chunks (float64 copies
    of a 6 GB output do not fit)."""
    return budget.compare(o, truth)


def fingerprint(t: torch.Tensor) -> tuple:
    """Enough of an output to tell a repeated one (C08) without keeping several GB per trial (a complex one by its
    real and imaginary parts)."""
    flat = real_view(t).reshape(-1)
    sample = flat[:: max(1, flat.numel() // 4096)][:4096].double().cpu()
    return (tuple(t.shape), float(flat.double().sum()) if t.numel() else 0.0, sample)


def same_for_every_sample(o: torch.Tensor, r: torch.Tensor, budget: Budget | None = None) -> bool:
    """Whether every sample's output (each slice along the first dimension) is the same where the reference's
    differ: an output that carries nothing of its input (an honest model whose activations all died, a kernel that
    returns its bias), told from an answer kept from an earlier call, which differs from sample to sample as the
    reference's do. "The same" is within the output's own ``budget`` (one sample's output against the first's, as a
    trial's output is judged against the truth): a GEMM or a reduction over identical rows need not round every row
    alike, and a collapsed model whose input still moves its last bits is no cache (one H200 run of a model-written
    MobileNetV1 was called C08 for rows that differed in their last bits, and wrong in the next two runs)."""
    if o.dim() == 0 or o.shape[0] < 2 or o.shape != r.shape:
        return False
    return samples_agree(o, budget) and not samples_agree(r, budget)


def samples_agree(t: torch.Tensor, budget: Budget | None) -> bool:
    """Whether every slice of ``t`` along its first dimension is the first one: bitwise, or within ``budget`` (its
    fp32 reference left out: the comparison is of ``t`` with itself)."""
    first = t[:1].expand_as(t)
    if torch.equal(t, first):
        return True
    if budget is None or not t.is_floating_point():
        return False
    return not budget.light().compare(t, first)["n_bad"]


def same_fingerprint(a: tuple, b: tuple) -> bool:
    """Whether two fingerprints are equal: the same shape, sum and sampled elements."""
    return a[0] == b[0] and a[1] == b[1] and torch.equal(a[2], b[2])


def reference64(model64, inputs: list, track: bool = False) -> list | None:
    """The float64 reference's outputs on ``inputs`` (widened), or None without a float64 model or when it
    fails here (then the fixed tolerance applies to this trial). ``track``: index outputs of a selection marked with
    what they select (``ties.reference_outputs``; the plan's ``selects``)."""
    if model64 is None:
        return None
    try:
        with torch.no_grad():
            return reference_outputs(model64, widen(inputs), track)
    except Exception:  # noqa: BLE001 - the plan ran it once; a failure here is the fixed tolerance, not a verdict
        return None


def reference64_judged(model64, inputs: list, track: bool, pooled: list,
                       other_shape: bool = False) -> tuple[list | None, list]:
    """``reference64`` and the RefStats to judge its outputs by: the plan's (``pooled``) where they hold for this
    run; run under a ``ReductionTracker`` where they do not: at another shape than the plan's (the extra-shape
    trial), each output's reductions are this run's (a batch norm over twice the rows sums twice the terms), and
    where a one-pass variance lies on an output's way (``RefStats.variance``), its per-element floor
    (``RefStats.spread``) is this run's: its groups' statistics are this job's weights' and inputs' (a job draws
    its own weights), never the plan's. The plan's stats where the run fails here (the fixed tolerance then)."""
    if model64 is None:
        return None, pooled
    if not other_shape and not any(getattr(p, "variance", False) for p in pooled):
        return reference64(model64, inputs, track), pooled
    try:
        with torch.no_grad(), ReductionTracker() as tracker:
            outs = reference_outputs(model64, widen(inputs), track)
        seen = tracker.reductions(outs)
    except Exception:  # noqa: BLE001 - as reference64: the fixed tolerance, not a verdict
        return None, pooled
    stats = list(pooled) + [RefStats(0.0, 0.0)] * max(0, len(seen) - len(pooled))
    for k, r in enumerate(seen):
        p = stats[k]
        if other_shape:
            p = p._replace(reduction=r.length, same_sign=r.same_sign, scan=r.scan)
        stats[k] = p._replace(spread=r.spread if p.variance else None, folded=r.folded if p.variance else p.folded)
    return outs, stats


def reference64_aligned(r: torch.Tensor, r64):
    """The float64 reference's output in the fp32 reference's order where the output has none (a topk with
    ``sorted=False``, class 110: the two runs may order the same selection differently), else as it is: the budget
    compares them element for element."""
    mark = selection_of(r64) if isinstance(r64, torch.Tensor) else None
    if not isinstance(mark, Unordered) or r64.shape != r.shape:
        return r64
    if mark.sel is None:  # by value (in the fp32 reference's dtype, for the comparison of keys)
        return aligned(r64.to(r.dtype), r, mark).to(r64.dtype)
    return aligned(r64, r, mark)  # by the float64 values its indices and the fp32 reference's select


class _Budgeted:
    """The judge's ``ties.TieRule``: a candidate's pick is a tie of the reference's where the budget of the picked
    values (measured from the fp32 reference's picks against the float64 reference's ``r64``, as a values output's
    is: verifier/judge/numerics.py) accepts it (docs/ANTI_CHEAT.md classes 77, 108, 111)."""

    def __init__(self, r64, cfg: VerifyConfig, ref_mod):
        self.r64, self.cfg, self.ref_mod = r64, cfg, ref_mod
        mark64 = selection_of(r64) if isinstance(r64, torch.Tensor) else None
        self.mark64 = mark64.sel if isinstance(mark64, Unordered) else mark64

    def selection(self, mark, r):
        sel64 = self.mark64 if isinstance(self.mark64, Selection) else None
        theirs32 = picked(mark.src, mark, as_index(r, mark))
        theirs64 = picked(sel64.src, sel64, as_index(self.r64, sel64)) if sel64 is not None else None
        budget, truth = budget_for(theirs32, theirs64, self.cfg, self.ref_mod)
        return (lambda mine, _: budget.accepts(mine, truth.to(mine.device))), \
            (sel64.src if sel64 is not None else None)

    def threshold(self, mark, r):
        d64 = self.mark64.difference() if isinstance(self.mark64, Threshold) else None
        budget, truth = budget_for(mark.difference(), d64, self.cfg, self.ref_mod)
        return lambda d: budget.accepts(torch.zeros_like(truth), truth)

    def pooled(self, mark, r):
        theirs32 = pooled_picks(mark.src, mark, r)[0]
        theirs64 = pooled_picks(self.mark64.src, self.mark64, self.r64)[0] if isinstance(self.mark64, Pooled) else None
        budget, truth = budget_for(theirs32, theirs64, self.cfg, self.ref_mod)
        return lambda mine, _: budget.accepts(mine, truth.to(mine.device))


def resolve_ties(o: torch.Tensor, r: torch.Tensor, r64, cfg: VerifyConfig, ref_mod) -> tuple[torch.Tensor, int, int]:
    """``ties.resolved`` by the judge's budget (``_Budgeted``): a candidate's output with its valid choices among
    tied values made the reference's, how many, how many name another of exactly equal values where the op documents
    which; anything else unchanged."""
    return resolved(o, r, _Budgeted(r64, cfg, ref_mod))


# ---------------------------------------------------------------------------- the checks


@cheats.probe(cheats.C05, cheats.C06, cheats.C08, cheats.C11, cheats.C13, where="judge")
def check_outputs(outs: list, refs: list, refs64: list | None, inputs: list, here: "Digest | None", label: str,
                  cfg: VerifyConfig, ref_mod, poison: int, prev: list, ev: Evidence, errs: list,
                  ref_repeats: bool = False, pooled: list | None = None, near: list | None = None) -> bool:
    """Correctness of one trial, plus what the outputs reveal: C11 (the reference computed differently in the
    candidate's process), C13 (fp32 computed at lower precision), C06 (an output nothing wrote), C05 (an input,
    a constant or zeros), C08 (an earlier call's output again). ``refs64`` is the float64 reference (the
    tolerance is measured from it: verifier/judge/numerics.py) or None, ``pooled`` per output the reference's (error,
    scale) on other draws (TaskPlan.pooled); ``ref_repeats`` says the reference's own output on this trial
    repeats an earlier trial's (then a repeated output is no sign of caching). True when every output matches.
    ``near``, where given, gets one entry per output that does not match: whether it is a near miss (``near_miss``)."""
    ok = True
    if here is not None and not digests_match(here.values, refs):  # a digest, never the output itself
        ev.add(cheats.C11, f"{label}: the reference computed differently inside your process (global state "
                           "tampered).")
    near = near if near is not None else []
    if len(outs) != len(refs):
        ev.add(None, f"{label}: returned {len(outs)} output(s), expected {len(refs)}.")
        near.append(False)
        return False
    for k, (o, r) in enumerate(zip(outs, refs)):
        if tuple(o.shape) != tuple(r.shape):
            ev.add(None, f"{label}: output shape {list(o.shape)}, expected {list(r.shape)}.")
            ok = False
            near.append(False)
            continue
        if o.dtype != r.dtype:
            ev.add(cheats.C13 if r.dtype == torch.float32 and o.dtype in LOW_PRECISION else None,
                   f"{label}: output dtype {o.dtype}, expected {r.dtype}.")
            ok = False
            near.append(False)
            continue
        shape, what = tuple(r.shape), label
        r64k = reference64_aligned(r, refs64[k] if refs64 is not None and k < len(refs64) else None)
        o, _, documented = resolve_ties(o, r, r64k, cfg, ref_mod)  # another index among tied values is as right
        if documented:
            ev.add(None, f"{what}: {documented} index(es) name another of several exactly equal values where the op "
                         "documents which one it returns: the first occurrence (argmax, argmin, max / min over a "
                         "dimension) or the input's order (a stable sort).")
        if r.is_complex():  # judged as its (real, imaginary) pairs: both parts compared, each within its budget
            what = label + " (complex: compared as real and imaginary parts, the last index 0 or 1)"
        o, r, r64 = real_views(o, r, r64k)
        o = o.to(r.device)
        n_poison = poisoned(o, poison) if o.is_floating_point() else 0
        if n_poison and poisoned(r, poison) < n_poison:
            # An output nothing wrote is a bet on stale memory (the reference's freed result); a few
            # unwritten elements are an honest indexing bug, judged wrong with the same diagnosis.
            ev.add(cheats.C06 if n_poison == o.numel() else None,
                   f"{what}: {n_poison} of {o.numel()} output elements were never written (they still hold the "
                   "poison pattern of uninitialised memory).")
        if o.is_floating_point() and bool((~torch.isfinite(o) & torch.isfinite(r)).any()):
            ev.add(None, f"{what}: output contains NaN or inf where the reference is finite.")
        pool = pooled[k] if pooled and k < len(pooled) else None
        budget, truth = budget_for(r, r64, cfg, ref_mod, pool)
        m = compare(o, truth, budget)
        errs.append((m["max_abs"], m["max_rel"], budget.light()))
        if m["n_bad"]:
            ok = False
            near.append(near_miss(m, budget, truth) and not n_poison)
            ev.add(None, feedback.describe_mismatch(m, shape, what) + f" Allowed: {budget.describe()}.")
            if not n_poison and looks_lowered(m, budget, truth) and not error_follows_inputs(o, truth, inputs):
                ev.add(cheats.C13, f"{what}: the error is the size of reduced-precision rounding (fp16, bf16, "
                                   f"TF32 or approximate math) on many elements; the task is "
                                   f"{'float64' if r.dtype == torch.float64 else 'fp32'}.")
        # an output within the budget is correct however it looks: a constant or repeated output that matches
        # says the task barely depends on its inputs, not that the candidate cached or made up its answer
        constant_out = o.numel() > 1 and bool((o == o.reshape(-1)[0]).all())
        if m["n_bad"] and (any(isinstance(x, torch.Tensor) and x.shape == o.shape and torch.equal(o, x.to(o.device))
                               and not torch.equal(r, x.to(r.device)) for x in inputs) or
                           (constant_out and not bool((r == r.reshape(-1)[0]).all()))):
            ev.add(cheats.C05, f"{what}: the output is an input, a constant or all zeros.")
        fp = fingerprint(o)
        earlier = [right for p, right in prev if same_fingerprint(p, fp)] if m["n_bad"] and not ref_repeats else []
        if earlier and (any(earlier) or not same_for_every_sample(o, r, budget)):
            ev.add(cheats.C08, f"{what}: the output is identical to an earlier call's output on different inputs.")
        elif earlier:  # a collapsed model (its answer the same for every sample and every call), not a cached one
            ev.add(None, f"{what}: the output does not depend on the input: every sample's output is the same, "
                         "up to rounding, and the same as on an earlier call's different inputs.")
        prev.append((fp, not m["n_bad"]))
    return ok


def load_sealed(ledger, job_dir: Path, name: str, check: bool = False):
    """``job_dir / name`` loaded as the verifier sealed it (``verifier.execute.channel.Ledger``): its own copy, mapped
    (``torch.load(mmap=True)``: no process but the verifier holds it), or the file itself, read whole (its writer may
    still hold it), where the seal hashed it. ``check``: raise ``Unsealed`` first where the file was changed since the
    seal (an input file, which is drawn again from the job's seed otherwise; an output's change is judged by its
    caller, which loads nothing then). No ledger (a knockout run of the verifier's own): the file."""
    if ledger is None:
        return torch.load(Path(job_dir) / name, weights_only=True)
    path = ledger.check(job_dir, name) if check else ledger.source(job_dir, name)
    return torch.load(path, weights_only=True, mmap=ledger.mapped(name))


# An output that misses its budget by at most this factor of its allowance, on elements whose errors bear no lowering's
# signature (verifier/judge/lowering.py ``looks_lowered``), is the error an honest kernel near its tolerance makes on one
# more draw: wrong, as on a trial of the benchmark's shape, never the sign of a cheat (docs/ANTI_CHEAT.md class 116).
# It was: a timed output checked in full, C16 ("wrong although the correctness trials passed"); the extra shape's
# trial, C14 ("correct on the benchmark shape but wrong on another"). An fp32 one-pass variance (sum and sum of
# squares: a batch norm after a linear layer on torch.rand inputs) misses by about 1.5x of the allowance on its draws
# (read off its verdict's lines on the cpu backend; tests/redteam/test_redteam_timed_margin.py), on the extra shape's
# doubled batch too. A timed call lowered to fp16 / bf16 / TF32 misses by 10x and more on many elements, one that
# computes something else fails the harness's own check of every timed output first, and sizes written into a kernel
# give another shape's answer garbage, another shape or an error.
NEAR_MISS = 4.0


def near_miss(m: dict, b: Budget, truth: torch.Tensor) -> bool:
    """Whether a failing comparison (``Budget.compare``'s ``m``) is an honest kernel's near miss (``NEAR_MISS``)."""
    return bool(m["n_bad"]) and m["max_over"] <= NEAR_MISS and not looks_lowered(m, b, truth)


@cheats.probe(cheats.C16, where="harness")
def check_clocked_outputs(clocked, plan, model, model64, cfg: VerifyConfig, ev: Evidence,
                          give_way=None) -> list[str]:
    """C16: the timed calls' outputs as the harness read them (verifier/execute/harness.py): every one was checked there
    against the reference on its own inputs (did it compute this input's answer); a few, picked at random after
    the clock stopped, are judged here in full, against the measured budget, as a trial is, and on cpu the calls
    of the bracket whose time is reported (the least: one bracket decides it) too. A full check missed by a near miss
    (``near_miss``) is no evidence of C16: its lines are returned, and the verdict is wrong (the timed call's draw is
    one more the kernel gets wrong)."""
    wrong = [p for p in clocked.problems if not p.startswith("a timed call failed")]
    if wrong:
        ev.add(cheats.C16, f"A timed call's output, read by the verifier, was not the answer for its inputs ({wrong[0]}): "
                           "timed calls must compute what the checked ones do.")
        return []
    picked = [(f"Timed call {j + 1} of those checked in full", pair) for j, pair in enumerate(clocked.kept)]
    picked += [(f"Call {j + 1} of the fastest timed bracket (the one whose time is reported), checked in full", pair)
               for j, pair in enumerate(clocked.fastest)]
    missed: list[str] = []
    for what, (inputs, got) in picked:
        if give_way is not None:  # between the pieces of device work: a waiting timer goes first
            give_way()
        with torch.no_grad():
            refs = [r for r in reference_outputs(model, inputs, plan.selects) if isinstance(r, torch.Tensor)]
            refs64, pooled = reference64_judged(model64, inputs, plan.selects, plan.pooled)
            refs64 = [r for r in refs64 if isinstance(r, torch.Tensor)] if refs64 else refs64
        checked = []  # (comparison, budget, the value it was compared with, shape)
        for k, (o, r) in enumerate(zip(got, refs)):
            if o.shape != r.shape or o.dtype != r.dtype:
                continue
            pool = pooled[k] if k < len(pooled) else None
            r64k = reference64_aligned(r, refs64[k] if refs64 and k < len(refs64) else None)
            o = resolve_ties(o, r, r64k, cfg, plan.ref_mod)[0]
            o, r, r64 = real_views(o, r, r64k)  # as a trial's
            b, truth = budget_for(r, r64, cfg, plan.ref_mod, pool)
            checked.append((compare(o.to(truth.device), truth, b), b, truth, tuple(o.shape)))
        failing = [c for c in checked if c[0]["n_bad"]]
        if len(checked) != len(refs) or not all(near_miss(m, b, truth) for m, b, truth, _ in failing):
            ev.add(cheats.C16, f"{what}: the output was wrong although the correctness trials passed (behaviour "
                               "differs when timed).")
            return []
        for m, b, _, shape in failing:
            missed.append(feedback.describe_mismatch(m, shape, what) + f" Allowed: {b.describe()} (your correctness "
                          "trials passed: your kernel's error is near the tolerance on some inputs).")
    return missed


def written_inputs(after: list, before: list) -> list[int]:
    """The positions of the task's inputs that its reference's forward changed (a tensor, or one in a list the input
    holds): ``after`` the inputs it was called on, ``before`` an identical draw it never saw (NaN equal to NaN, as
    the child's and the harness's input checks read them)."""
    return [i for i, (x, y) in enumerate(zip(after, before)) if not same_value(x, y)]


def inputs_fault(written: list[int]) -> str:
    """Why no candidate can be judged on a reference that writes into its inputs ("" when it does not): a candidate
    must leave its inputs as they were (C07, checked in the child after every trial and by the harness after every
    timed call), so a faithful copy of an in-place reference (``x.relu_()``, ``nn.ReLU(inplace=True)`` on an input)
    is called a cheat, and one that does not write its inputs returns what the reference returns on inputs it has
    not written. Such a task is the task's fault, as one whose output does not depend on its inputs."""
    if not written:
        return ""
    which = ", ".join(str(i) for i in written)
    return (f"the reference writes into its input{'s' if len(written) > 1 else ''} {which} (an in-place op such as "
            "`x.relu_()`, `x += ...` or `nn.ReLU(inplace=True)` on an input), while every candidate must leave its "
            "inputs as they were: make the reference work on its own copy (`x = x.clone()`) or out of place")


def reference_fault(out: list, out_other: list, same_inputs: bool, outs64: list | None = None) -> str:
    """Why a task's reference output does not depend on its inputs ("" when it does): ``out`` and
    ``out_other`` are its outputs on two draws of get_inputs with different seeds, ``outs64`` the float64
    reference's on the same two draws (or None). An output that is no tensor (``.item()``'s Python float), a product
    of 512 normals that underflows to zero, a constant or
    NaN output is the task's fault, and so is an output that is constant in exact arithmetic and varies only
    by fp32 rounding (the mean of group-normalised values, ~1e-8): no candidate can be judged on it."""
    others = [o for o in out if not isinstance(o, torch.Tensor)]  # (a None read as one: the model returned None)
    if others or not out:  # KernelBench outputs are tensors: an honest copy of this one was C10
        return (f"the reference returns {type(others[0]).__name__ if others else 'nothing'} where outputs are tensors "
                "(`.item()`, a Python number or None): no candidate can be judged on it; return a tensor (a 0-dim one "
                "for a scalar)")
    floats = [(o, p) for o, p in zip(out, out_other) if isinstance(o, torch.Tensor) and o.is_floating_point()
              and isinstance(p, torch.Tensor)]
    if not floats or same_inputs:
        return ""
    # an integer or boolean output that follows the inputs is an answer to judge (the indices of a topk whose values
    # are the same on every draw: the top 8 of 512 digits are all 9s; docs/ANTI_CHEAT.md class 78)
    if any(isinstance(o, torch.Tensor) and not (o.is_floating_point() or o.is_complex()) and isinstance(p, torch.Tensor)
           and (o.shape != p.shape or not torch.equal(o, p)) for o, p in zip(out, out_other)):
        return ""
    if all(not bool(torch.isfinite(o).any()) for o, _ in floats if o.numel()):
        return "the reference output is NaN or inf everywhere on random inputs"
    if all(o.shape == p.shape and torch.equal(o, p) for o, p in floats):
        zero = all(not bool(o.any()) for o, _ in floats)
        return ("the reference output is all zero for every input (underflow or a constant)" if zero else
                "the reference output is identical for different inputs (it does not depend on them)")
    if outs64 and len(outs64) == 2:
        pairs = [(a, b) for a, b in zip(*outs64) if isinstance(a, torch.Tensor) and a.is_floating_point()
                 and isinstance(b, torch.Tensor) and a.shape == b.shape]
        if pairs and all(float((a - b).abs().nan_to_num(0.0).max()) <= 1e-9 * max(1.0, float(a.abs().nan_to_num(
                0.0).max())) for a, b in pairs if a.numel()):
            return ("the reference output is the same for different inputs in exact arithmetic (float64); its fp32 "
                    "values differ only by rounding")
    return ""
