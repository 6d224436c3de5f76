"""How close an fp32 output must be: a tolerance measured from the computation, per element, not a fixed number.

The reference runs twice in the verifier's process: as the task wrote it (fp32) and in float64 (the same weights
and inputs, widened). The float64 output is the truth a candidate is compared with; the fp32 reference's own
distance from it (``e = |r32 - r64|``) says how much error an honest fp32 implementation of this computation
makes. The budget is per element, from statistics of the element's neighbourhood (its block: a row of the output
along the last dimension, at most ``BLOCK_MAX`` elements, at least ``MIN_LOCAL``: several short rows), never from
the output's largest value or largest error alone:

    budget_i = max(atol_b, rtol_b * |r64_i|)
    atol_b   = max(tol_floor, tol_factor * E_b, F_s(K) * S_b)      S_b = min(S, TAIL * T_b)
    rtol_b   = max(F_r(K_same), tol_factor * R_b)

``E_b`` and ``R_b``: the median fp32 error |r32 - r64| and the median relative error |r32 - r64| / |r64| of the
block, at least the output's own medians (one block's error is one draw: a row's mean, a row's softmax
denominator); ``T_b`` the median nonzero |r64| of the block; ``S`` the output's largest finite |r64|. The medians
come from up to ``SAMPLES_PER_BLOCK`` evenly spaced elements of each block. ``F_s``, ``F_r``: ``tol_scale`` raised
for outputs of long reductions (``accumulation_floors``, below). An element passes where it is within its budget of
the float64 value, or of the fp32 reference's own value (an answer as good as torch's is always accepted: where
the fp32 reference is unstable, crossing a boundary float64 does not, either value is right, and that element
widens nothing else).

The terms (the cases of tests/test_verifier_precision.py and tests/redteam/test_redteam_precision.py;
measurements: bench/results/tolerance_cpu.md):
- ``tol_factor * E_b``, ``tol_factor * R_b`` (``VerifyConfig.tol_factor``, 64): another accumulation order of the
  same computation, where the fp32 reference's error is itself large: cancellation (x - mean(x) with an offset of
  1000), a normaliser computed by a long reduction (x / ||x||: every element carries its relative error);
  medians, so a few unstable elements (a floor crossing an integer, an overflow) widen nothing.
- ``tol_scale * |r64_i|`` (``tol_scale``, 8e-5, about 670 ulp): the element's own scale: fast-math libm
  (``__expf``, a few to tens of ulp) passes, fp16 (2^-11 of the value), TF32 and bf16 (2^-8) do not, whichever
  elements they are on.
- ``tol_scale * S_b``: long sequential accumulations and elements near zero after cancellation, whose error is
  governed by the magnitude of the terms summed, not their own value: the output's scale, but at most ``TAIL``
  (4) x the typical magnitude of the block, so a few huge elements (``exp(20 x)``) do not lend their scale to every
  small one.
- long reductions (verifier/judge/reduction.py): the fp32 reference's BLAS or pairwise order is far more accurate
  than an honest kernel's one accumulator per output, and past ~5e5 positive terms (KernelBench's large-K
  matmul) a sequential sum misses ``tol_scale`` on every element while a bf16 lowering of the same sum is within
  it. The plan's float64 pass runs under a dispatch mode that records, per output, the longest reduction on its
  way (K: the contracted size of mm / bmm / conv / attention, the reduced size of sum / mean / norm / softmax /
  cumsum, carried through elementwise ops and views) and the longest whose terms share one sign (non-negative
  operands; squares, exponentials). ``F_s(K) = max(tol_scale, ACC_SQRT x eps32 x sqrt(K))`` (1.0: a zero-mean
  sequential sum errs by at most about 1.7 x eps32 x sqrt(K) of its typical value); ``F_r(K_same) =
  max(tol_scale, ACC_LINEAR x eps32 x K_same)`` (0.03: a same-sign one errs by 0.003..0.011 x eps32 x K of the
  sum; bench/results/accumulation_budget_cpu.md). A floor linear in K is never given to a sum that cancels: there
  a lowering's relative error does not shrink with K (an fp16-input sum of 1M normals stays C13), and an output's
  floors are its own reductions', not another output's.
- running sums (``scan_allowance``): an element of a scan carries the rounding of every partial sum before it on
  its line, so after an excursion (a sum out to 1000 and back near zero) its error is the excursion's while its
  block's values are small; a sequential fp32 scan was C13 there (and about once in 3,000 plans on the 16 x 65536
  extra shape of a plain 16 x 32768 cumsum). The plan's float64 pass records where a ``cumsum`` lies on the way
  while the values stay partial sums (views, copies, sums and differences, a factor per row; not after an exp or
  a matmul), along the output's rows or along another dimension or one a view has moved (``Reduction.scan``), and
  such an output's ``atol_b`` is at least ``SCAN_SPREAD`` (4) x EPS32 x sqrt(the sum of the squared values of the
  block's row(s)) (an honest scan reached 1.7 x that; along another dimension, sqrt(K) x the output's scale).
  The band a lowering's error is read against stays the block's own: fp16 or bf16 inputs to a running sum of
  normals, or partial sums stored rounded, are still C13 (bench/results/scan_budget_cpu.md); where the
  accumulator's own rounding is larger than an fp16 input's (an excursion far above the terms), the two cannot
  be told apart from the outputs.

Outputs of fewer than ``MIN_LOCAL`` elements (a sum to 4 numbers) have no neighbourhood to measure: one block,
scale ``max(S, the scale seen on the plan's other draws)`` (``pooled``), no cap.

Exact-valued outputs (integer and boolean dtypes; fp32 outputs whose values all lie on a lattice of 2^-m, m <=
``LATTICE_BITS``, below 2^24 units in both runs: floor, round, sign, comparisons, argmax, counts) are compared
exactly: each element must equal the float64 value or the fp32 reference's value; an element where the two differ
(the fp32 reference is unstable there) widens nothing else. An honest computation in another order crosses about
as many boundaries as its error is larger than the reference's, so up to ``tol_factor`` x the reference's unstable
elements (at most 1% of the output) may differ by at most the step the reference itself shows; with a stable
reference, none.

Non-finite values are compared as the fp32 reference produces them (inf where it overflows, NaN where it is NaN:
the either-value rule); a candidate's inf or NaN where the fp32 reference is finite is wrong.

C13 (precision lowering, ``looks_lowered``): over budget on at least 1% of the elements whose budget leaves room
to see a lowering, every bad element within ``LOWERING_BAND`` (2%) of its local scale ``max(|r64_i|, S_b)`` or
all within 2% of the output's scale (a crude approximation of a transcendental), and the error not systematic:
not an affine function of the value (a divisor off by one, a missing scale: ``SYSTEMATIC_FIT``), not whole
multiples of one step (a floor written as a truncation: ``whole_steps``), not following an input element by
element (an inclusive scan written exclusive, a reduction dropping a term: ``error_follows_inputs``). Those,
errors beyond the band and errors on few elements are a wrong answer (`wrong`), not lowering. A naive one-pass
variance E[x^2] - E[x]^2 computes in fp32 with catastrophic cancellation: where it loses more than the band (mean
/ std of a few hundred) it is `wrong`; where its cancellation loses as many bits as bf16 (mean / std of 10 to
100) its output cannot be told from a lowering and it is C13: the verifier sees outputs, not algorithms. Not told
apart either: a reduction over millions of terms that drops one (its error is below the band and follows no whole
input slice the check reads) is C13, and so is a systematic bug on an output of fewer than MIN_LOCAL elements.

``inputs.reference_numerics`` switches off TF32 for the fp32 reference (cuDNN convolutions use TF32 by default):
the reference is an fp32 computation, so TF32 in a candidate is lowering, not a match.

A complex64 output is judged as its (real, imaginary) pairs (``real_view``: float32 of one more dimension of 2)
against the float64 run's complex128 output seen the same way, so both parts get the measured budget of an fp32
output (converted to float64 whole, a complex tensor loses its imaginary part: docs/ANTI_CHEAT.md class 56).

A float64 output of a task that computes in float64 throughout (``RefStats.wide``: the plan saw no narrower
float on the reference's way) is its own truth, held to float64 rounding (``float64_budget``: F64_TOL of each value
and of the output's scale), where float32 arithmetic anywhere errs by ~6e-8 of a value.

Not covered: low-precision (fp16/bf16) outputs keep the fixed tolerances of VerifyConfig (``atol_low`` /
``rtol_low``), float64 outputs that come through float32 on the reference's way the fixed fp32 one, and a task's
own ATOL / RTOL wins. A reference that does not run in float64, or
whose float64 copy does not fit the device, falls back to the fixed fp32 tolerance (``atol_fp32`` /
``rtol_fp32``) and says so in ``Verdict.versions["tolerance"]``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass

import torch

from verifier.judge.reduction import EPS32, SCAN_NONE, SCAN_ROWS, RefStats, accumulation_floors

LOW_PRECISION = (torch.float16, torch.bfloat16)
# the error band of reduced-precision arithmetic, as a share of an element's local scale: above the budget and
# below this, with many elements off, the error is rounding of fewer mantissa bits rather than a logic bug
LOWERING_BAND = 2e-2
LOWERING_MIN_SHARE = 0.01
# an error that an affine function of the true value explains this well (uncentred R^2) is a systematic bug (a
# divisor off by one, a wrong epsilon or scale), not rounding: truncation toward zero explains 0.75, rounding ~0
SYSTEMATIC_FIT = 0.9
MIN_LOCAL = 64  # outputs with fewer elements are one block
BLOCK_MAX = 4096  # a block: a row along the last dimension, cut at this many elements
TAIL = 4.0  # the absolute term's scale is at most this x the block's median |value|
LATTICE_BITS = 8  # exact-valued outputs: multiples of 2^-m, m <= this ...
LATTICE_LIMIT = float(1 << 24)  # ... below 2^24 units (exactly representable in fp32)
CHUNK = 1 << 24  # elements handled at a time (a 6 GB output is measured and compared in pieces)
# a running sum's allowance over EPS32 x sqrt(sum of its line's squared partial sums): an honest sequential fp32
# scan's largest error reached 1.7 of it (2,560 rows of 4096..65536 normals, excursions, positive terms), an
# fp16-input scan of normals exceeds 4 x on most elements (bench/results/scan_budget_cpu.md)
SCAN_SPREAD = 4.0


def widen(obj):
    """Floating tensors (and lists / tuples of them) as float64, complex64 ones as complex128; everything else
    unchanged."""
    if isinstance(obj, torch.Tensor):
        if obj.dtype == torch.complex64:
            return obj.to(torch.complex128)
        return obj.double() if obj.is_floating_point() else obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(widen(o) for o in obj)
    return obj


def real_view(t):
    """A complex tensor as its (real, imaginary) pairs (``torch.view_as_real``: a float tensor of one more dimension
    of 2, no copy), anything else unchanged. A complex output is judged part by part against the budget of its
    parts' float dtype: converted to float64 instead, its imaginary part was dropped (every honest FFT judged on an
    exact match of its real part, and an imaginary part that skipped the work never compared)."""
    if isinstance(t, torch.Tensor) and t.is_complex():
        return torch.view_as_real(t.resolve_conj())
    return t


def real_views(o: torch.Tensor, r: torch.Tensor, r64) -> tuple:
    """An output, its reference and its float64 reference as they are judged: a complex output's three as their
    (real, imaginary) pairs (``real_view``; a float64 reference that is not complex dropped), others unchanged."""
    if not r.is_complex():
        return o, r, r64
    return real_view(o), real_view(r), real_view(r64) if isinstance(r64, torch.Tensor) and r64.is_complex() else None


def float64_model(model: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy of the reference (same weights and buffers, widened exactly)."""
    return copy.deepcopy(model).double()


def block_size(shape) -> int:
    """Elements per block of an output of ``shape`` (flattened order): a row along the last dimension, cut at
    BLOCK_MAX, or as many whole short rows as make MIN_LOCAL; the whole output when it is smaller than that."""
    n = math.prod(shape) if len(shape) else 1
    if n < MIN_LOCAL:
        return max(n, 1)
    last = shape[-1] if len(shape) else 1
    if last <= 0:
        return max(n, 1)
    if last >= MIN_LOCAL:
        return min(last, BLOCK_MAX)
    return min(last * -(-MIN_LOCAL // last), n)


def _aligned_chunk(block: int) -> int:
    return max(block, (CHUNK // max(block, 1)) * block)


def _same_special(c: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Elements where ``c`` has the non-finite value ``r`` has (NaN for NaN, the same infinity)."""
    return (torch.isnan(c) & torch.isnan(r)) | (torch.isinf(r) & (c == r))


def _finite_abs(t: torch.Tensor) -> torch.Tensor:
    """|t| with inf and NaN as 0."""
    return t.abs().nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)


@dataclass
class Budget:
    """The tolerance of one output against ``truth``; ``kind`` says where it came from (float64: measured per
    element; exact: an exact-valued output; fixed: the config's numbers; task: the task's own ATOL / RTOL).

    Every element ``i`` may be off by ``atol + rtol * |truth_i|`` (fixed / task: the same for all) or, measured
    (float64), by ``max(atol_b, rtol_b * |truth_i|)`` per block of ``block`` elements (``atol_b``, ``rtol_b``: see
    the module docstring; ``s_eff`` the block's scale), and ``alt`` (the fp32 reference) is an accepted answer
    too. exact: equal to ``truth`` or ``alt``, except ``flips`` elements off by at most ``step``."""

    atol: float
    rtol: float
    kind: str
    ref_err: float | None = None
    scale: float | None = None
    alt: torch.Tensor | None = None
    block: int = 0
    atol_b: torch.Tensor | None = None
    rtol_b: torch.Tensor | None = None
    s_eff: torch.Tensor | None = None
    err_level: float = 0.0
    flips: int = 0
    step: float = 0.0
    unstable: int = 0
    reduction: int = 0  # the longest reduction on the output's way (raises the floors; 0: not recorded)

    def describe(self) -> str:
        if self.kind == "exact":
            if self.alt is None:
                return "exact match (an integer or boolean output)"
            return (f"exact match (an exact-valued output; where the fp32 reference and float64 differ, on "
                    f"{self.unstable} element(s), either value; {self.flips} other element(s) may differ by at "
                    f"most {self.step:.3g})")
        if self.kind == "fp64":
            return (f"float64 tolerance atol {self.atol:.3g} ({F64_TOL:.0e} x the output's largest |value|), rtol "
                    f"{self.rtol:.3g}: the task computes in float64, and float32 arithmetic errs by ~6e-8 of a value")
        if self.kind != "float64":
            return f"{self.kind} tolerance atol {self.atol:.3g}, rtol {self.rtol:.3g}"
        lo_a, hi_a = float(self.atol_b.min()), float(self.atol_b.max())
        lo_r, hi_r = float(self.rtol_b.min()), float(self.rtol_b.max())
        return (f"measured tolerance per element, the larger of {lo_a:.3g}..{hi_a:.3g} and {lo_r:.3g}..{hi_r:.3g} x "
                f"|value| per row (the fp32 reference's own error against float64: median {self.err_level:.3g}, "
                f"largest {self.ref_err:.3g}; output scale {self.scale:.3g}"
                + (f"; floors for a {self.reduction}-term reduction" if self.reduction > 1 else "")
                + "), against float64 or the fp32 reference's own value")

    def light(self) -> "Budget":
        """This budget without the fp32 reference it holds (what a verdict keeps after its trial: no output stays
        alive across trials)."""
        return dataclasses.replace(self, alt=None)

    # ---------------------------------------------------------------- per element
    def _gather(self, t: torch.Tensor, flat_idx: torch.Tensor) -> torch.Tensor:
        return t.to(flat_idx.device)[torch.div(flat_idx, self.block, rounding_mode="floor")].to(torch.float64)

    def allowance(self, lo: int, a: torch.Tensor) -> torch.Tensor:
        """The allowed |error| of the flat elements ``lo ..`` whose finite |truth| is ``a`` (float64); ``lo`` is
        a multiple of ``block`` for a measured budget (the chunks of ``compare`` are)."""
        if self.kind != "float64":
            return a * self.rtol + self.atol
        n, bsz = a.numel(), self.block
        first, full = lo // bsz, a.numel() // bsz
        out = torch.empty_like(a)
        at, rt = self.atol_b.to(a.device).to(torch.float64), self.rtol_b.to(a.device).to(torch.float64)
        if full:
            o2 = out[:full * bsz].view(full, bsz)
            torch.mul(a[:full * bsz].view(full, bsz), rt[first:first + full, None], out=o2)
            torch.maximum(o2, at[first:first + full, None], out=o2)
        if n > full * bsz:
            k = first + full
            out[full * bsz:] = (a[full * bsz:] * rt[k]).clamp_min(float(at[k]))
        return out

    def _allow_at(self, flat_idx: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        if self.kind != "float64":
            return a * self.rtol + self.atol
        return torch.maximum(self._gather(self.atol_b, flat_idx), self._gather(self.rtol_b, flat_idx) * a)

    def _scale_at(self, flat_idx: torch.Tensor, a: torch.Tensor, whole: float) -> torch.Tensor:
        """The scale an element's lowering error is measured against: max(|r64_i|, S_b) (fixed kinds: the
        output's largest |value|, ``whole``)."""
        if self.kind != "float64":
            return torch.full_like(a, whole)
        return torch.maximum(a, self._gather(self.s_eff, flat_idx))

    def compare(self, o: torch.Tensor, truth: torch.Tensor) -> dict:
        """Where and how much ``o`` misses this budget (same shape as ``truth``), in chunks: ``n_bad`` elements
        over budget of ``numel``, ``max_abs`` / ``max_rel`` the largest error against the nearest accepted
        answer, the first bad element (``first_index``, ``got``, ``expected``), and what looks_lowered reads
        (``n_band``: bad elements within LOWERING_BAND of their scale, ``max_bad``, ``n_nonfinite``: bad elements
        that are inf or NaN, ``n_visible``: elements whose allowance is below LOWERING_BAND of their scale,
        ``fit``: how much of the error an affine function of the value explains). One pass; a second one over
        a failing output only."""
        of, tf = o.reshape(-1), truth.reshape(-1)
        af = self.alt.reshape(-1) if self.alt is not None else None
        n = of.numel()
        out = {"n_bad": 0, "numel": n, "max_abs": 0.0, "max_rel": 0.0, "n_band": 0, "n_nonfinite": 0, "fit": 0.0,
               "n_visible": 0, "max_bad": 0.0, "scale": 0.0}
        exact = self.kind == "exact"
        whole = 0.0
        if self.kind not in ("float64", "exact"):
            whole = self.scale if self.scale is not None else _finite_max_abs(truth)
        out["scale"] = whole if self.kind != "float64" else float(self.scale or 0.0)
        flips, flip_far, first = 0, False, None
        samples: list = []  # a sample of the bad elements' errors (whole steps or rounding?)
        step = _aligned_chunk(self.block) if self.kind == "float64" else CHUNK
        for s in range(0, n, step):
            c = of[s:s + step].to(torch.float64)
            r = tf[s:s + step].to(c.device).to(torch.float64)
            d = (c - r).abs_()
            a = _finite_abs(r)
            if exact:
                ok = c == r
            else:
                ok = d <= self.allowance(s, a)
            dm = d.masked_fill_(~ok, 0.0)
            if dm.numel():
                out["max_abs"] = max(out["max_abs"], float(dm.max()))
                out["max_rel"] = max(out["max_rel"], float((dm / a.clamp_min(1e-12)).max()))
            idx = (~ok).nonzero().reshape(-1)
            if not idx.numel():
                continue
            # the few elements the float64 value does not accept: the fp32 reference's value, non-finite values
            ci, ri, ai = c[idx], r[idx], a[idx]
            di = (ci - ri).abs()
            special = _same_special(ci, ri)
            allow = torch.zeros_like(ai) if exact else self._allow_at(idx + s, ai)
            okr = special | (di <= allow)
            err = torch.where(special, torch.zeros_like(di), di)
            if af is not None:
                alti = af[s:s + step].to(c.device)[idx].to(torch.float64)
                d2 = (ci - alti).abs()
                special2 = _same_special(ci, alti)
                okr |= special2 | (d2 <= allow)
                err = torch.minimum(err, torch.where(special2, torch.zeros_like(d2), d2))
            fin = torch.isfinite(err)
            if bool((okr & fin).any()):
                e_ok = err[okr & fin]
                out["max_abs"] = max(out["max_abs"], float(e_ok.max()))
                out["max_rel"] = max(out["max_rel"], float((e_ok / ai[okr & fin].clamp_min(1e-12)).max()))
            bad = ~okr
            nb = int(bad.sum())
            if not nb:
                continue
            if exact:
                flips += nb
                flip_far = flip_far or bool((bad & ~(di <= self.step)).any())
            else:
                room = LOWERING_BAND * self._scale_at(idx + s, ai, whole)
                out["n_band"] += int((bad & (err <= room)).sum())
                bad_err = err[bad]
                have = sum(t.numel() for t in samples)
                if have < STEP_SAMPLE:
                    samples.append(bad_err[torch.isfinite(bad_err)][:STEP_SAMPLE - have].cpu())
                out["max_bad"] = max(out["max_bad"], float(bad_err.max()) if bool(torch.isfinite(bad_err).all())
                                     else float("inf"))
            out["n_bad"] += nb
            out["n_nonfinite"] += int((bad & ~torch.isfinite(ci)).sum())
            if bool((bad & fin).any()):
                out["max_abs"] = max(out["max_abs"], float(err[bad & fin].max()))
                out["max_rel"] = max(out["max_rel"], float((err[bad & fin] / ai[bad & fin].clamp_min(1e-12)).max()))
            if first is None:
                k = int(bad.nonzero()[0])
                first = (s + int(idx[k]), float(ci[k]), float(ri[k]))
        if exact and flips and not flip_far and flips <= self.flips:
            out.update(n_bad=0, n_nonfinite=0)  # no more boundary crossings than an honest order makes
            first = None
        if first is not None and out["n_bad"]:
            flat, index = first[0], []
            for size in reversed(o.shape):
                index.append(flat % size)
                flat //= size
            out.update(first_index=tuple(reversed(index)), got=first[1], expected=first[2])
        if out["n_bad"] and not exact:
            self._failing_stats(of, tf, whole, out)
            out["whole_steps"] = whole_steps(torch.cat(samples) if samples else torch.zeros(0, dtype=torch.float64))
        return out

    def _failing_stats(self, of: torch.Tensor, tf: torch.Tensor, whole: float, out: dict) -> None:
        """The second pass over a failing output: ``n_visible`` and ``fit`` (see ``compare``)."""
        sums = torch.zeros(6, dtype=torch.float64)  # sum r^2, r, 1, d r, d, d^2
        step = _aligned_chunk(self.block) if self.kind == "float64" else CHUNK
        for s in range(0, of.numel(), step):
            c = of[s:s + step].to(torch.float64)
            r = tf[s:s + step].to(c.device).to(torch.float64)
            a = _finite_abs(r)
            if self.kind == "float64":
                full, bsz = a.numel() // self.block, self.block
                first = s // bsz
                se = self.s_eff.to(a.device).to(torch.float64)
                room = torch.empty_like(a)
                if full:
                    torch.maximum(a[:full * bsz].view(full, bsz), se[first:first + full, None],
                                   out=room[:full * bsz].view(full, bsz))
                if a.numel() > full * bsz:
                    room[full * bsz:] = a[full * bsz:].clamp_min(float(se[first + full]))
            else:
                room = torch.full_like(a, whole)
            out["n_visible"] += int((self.allowance(s, a) < LOWERING_BAND * room).sum())
            dd = c - r
            fin = torch.isfinite(dd)
            dd = dd.masked_fill_(~fin, 0.0)
            rr = r.masked_fill(~fin, 0.0)
            sums += torch.stack([(rr * rr).sum(), rr.sum(), fin.sum().to(torch.float64), (dd * rr).sum(),
                                 dd.sum(), (dd * dd).sum()]).cpu()
        srr, sr, sn, sdr, sd, sdd = (float(x) for x in sums)
        det = srr * sn - sr * sr
        if sn < MIN_LOCAL:  # a handful of elements: any two-parameter fit looks systematic
            return
        if sdd > 0 and det > 0:
            alpha, beta = (sdr * sn - sd * sr) / det, (srr * sd - sr * sdr) / det
            out["fit"] = max(0.0, min(1.0, (alpha * sdr + beta * sd) / sdd))
        elif sdd > 0:
            out["fit"] = min(1.0, sd * sd / (sn * sdd))


def _finite_max_abs(t: torch.Tensor) -> float:
    """The largest finite |value| of ``t`` (0 for none), in chunks of the flat view and without boolean
    indexing: ``t[torch.isfinite(t)]`` on a 4-D output is a nonzero() of N x 4 int64 indices, 56 GiB for
    KernelBench's 7 GiB RMSNorm output (technoabsurdist-l1-p36 ended verifier_error for it on an H100)."""
    f, best = t.detach().reshape(-1), 0.0
    for s in range(0, f.numel(), CHUNK):
        a = f[s:s + CHUNK].abs()
        a = a.masked_fill_(~torch.isfinite(a), 0) if a.is_floating_point() else a
        if a.numel():
            best = max(best, float(a.max()))
    return best


def _lattice_bits(t: torch.Tensor) -> int | None:
    """The least m <= LATTICE_BITS such that every finite value of ``t`` is a multiple of 2^-m below 2^24 units
    (an exact-valued output), or None. A sample is tried first: a continuous output fails it at once."""
    f = t.reshape(-1)
    sample = f[:: max(1, f.numel() // 4096)].to(torch.float64)
    sample = sample[torch.isfinite(sample)] * (1 << LATTICE_BITS)
    if not bool((sample == torch.round(sample)).all()):
        return None
    need = 0
    for s in range(0, f.numel(), CHUNK):
        v = f[s:s + CHUNK].to(torch.float64)
        v = v[torch.isfinite(v)]
        if not v.numel():
            continue
        for m in range(need, LATTICE_BITS + 2):
            if m > LATTICE_BITS:
                return None
            w = v * (1 << m)
            if bool((w == torch.round(w)).all()):
                need = m
                break
        if float(v.abs().max()) * (1 << need) >= LATTICE_LIMIT:
            return None
    return need


def exact_budget(r32: torch.Tensor, r64: torch.Tensor | None, cfg) -> Budget:
    """An exact-valued output: equal to the float64 value or the fp32 reference's; elements where those differ
    (the fp32 reference unstable) widen nothing else; up to tol_factor x that many other elements (at most
    LOWERING_MIN_SHARE of the output) may be off by the step the reference itself shows."""
    if r64 is None:
        return Budget(0.0, 0.0, "exact")
    a, b = r32.reshape(-1), r64.reshape(-1)
    unstable, step = 0, 0.0
    for s in range(0, a.numel(), CHUNK):
        x = a[s:s + CHUNK].to(torch.float64)
        y = b[s:s + CHUNK].to(x.device).to(torch.float64)
        idx = (x != y).nonzero().reshape(-1)
        if not idx.numel():
            continue
        xi, yi = x[idx], y[idx]
        differ = ~_same_special(xi, yi) & torch.isfinite(xi) & torch.isfinite(yi)
        k = int(differ.sum())
        if k:
            unstable += k
            step = max(step, float((xi - yi).abs()[differ].max()))
    flips = min(int(cfg.tol_factor * unstable), int(LOWERING_MIN_SHARE * a.numel()))
    return Budget(0.0, 0.0, "exact", ref_err=step, alt=r32, flips=flips, step=step, unstable=unstable)


SAMPLES_PER_BLOCK = 256  # a block's medians come from at most this many of its elements, evenly spaced


def _block_medians(x: torch.Tensor, block: int) -> torch.Tensor:
    """Per block of ``x`` (flat, NaN where an element does not count): the median of a sample of its elements
    (0 for a block without any)."""
    n = x.numel()
    full = n // block
    stride = max(1, block // SAMPLES_PER_BLOCK)
    parts = []
    if full:
        parts.append(torch.nanmedian(x[:full * block].view(full, block)[:, ::stride], dim=1).values)
    if n > full * block:
        parts.append(torch.nanmedian(x[full * block:][::stride]).reshape(1))
    return torch.nan_to_num(torch.cat(parts), nan=0.0)


def _sample(t: torch.Tensor, block: int, stride: int) -> torch.Tensor:
    """Every ``stride``-th element of each block of ``t`` (flat), whole blocks kept together (a copy of the
    sample only)."""
    full = t.numel() // block
    if not full:
        return t[::stride].clone()
    return torch.cat([t[:full * block].view(full, block)[:, ::stride].reshape(-1), t[full * block:][::stride]])


def measured_budget(r32: torch.Tensor, r64: torch.Tensor, cfg, pooled: tuple | None = None) -> Budget:
    """The per-element budget of one fp32 output from the reference's own error against its float64 twin
    (chunked: a 6 GB output is measured in pieces). ``pooled``: RefStats (or (error, scale)) seen on other draws
    of the same task (the plan's two): an output of fewer than MIN_LOCAL elements (a sum to 4 numbers) takes the
    larger scale, so it does not get a tight budget from one draw whose sums happen to be small; its reduction
    length raises the floors of both terms (``accumulation_floors``)."""
    f32, f64 = r32.reshape(-1), r64.reshape(-1)
    n = f32.numel()
    block = block_size(tuple(r32.shape))
    step = _aligned_chunk(block)
    stride = max(1, block // SAMPLES_PER_BLOCK)
    typical, level, rel, e_all, q_all = [], [], [], [], []
    err, scale = 0.0, 0.0
    for s in range(0, n, step):
        a = f32[s:s + step].to(torch.float64)
        b = f64[s:s + step].to(a.device).to(torch.float64)
        e = (a - b).abs_()
        mag = b.abs()
        fin = torch.isfinite(e)  # both finite (fp32-range values: the difference cannot overflow)
        if bool(fin.any()):
            err = max(err, float(e.masked_fill(~fin, 0.0).max()))
            scale = max(scale, float(mag.masked_fill(~fin, 0.0).max()))
        # statistics from a sample of every block: elements that count are finite, and not an exact zero in
        # both runs (a ReLU's zeros say nothing about the computation's scale or error)
        es, ms, fs = _sample(e, block, stride), _sample(mag, block, stride), _sample(fin, block, stride)
        use = fs & ((ms > 0) | (es > 0))
        nan = float("nan")
        m_u = ms.masked_fill(~use, nan)
        e_u = es.masked_fill(~use, nan)
        q_u = (es / ms).masked_fill(~(use & (ms > 0)), nan)
        k = -(-block // stride)  # the sample keeps whole blocks together: block j's are positions j*k .. j*k+k-1
        typical.append(_block_medians(m_u, k))
        level.append(_block_medians(e_u, k))
        rel.append(_block_medians(q_u, k))
        every = max(1, es.numel() // 65536)
        e_all.append(e_u[::every])
        q_all.append(q_u[::every])
    typ = torch.cat(typical) if typical else torch.zeros(1, dtype=torch.float64)
    lev = torch.cat(level) if level else torch.zeros(1, dtype=torch.float64)
    rl = torch.cat(rel) if rel else torch.zeros(1, dtype=torch.float64)
    # the error of one block is one draw (a row's mean, a row's softmax denominator): the output-wide median
    # is the floor of every block's level, so a block whose reference happened to be accurate is not tighter
    med_e = float(torch.nan_to_num(torch.nanmedian(torch.cat(e_all)), nan=0.0)) if e_all else 0.0
    med_q = float(torch.nan_to_num(torch.nanmedian(torch.cat(q_all)), nan=0.0)) if q_all else 0.0
    lev, rl = lev.clamp_min(med_e), rl.clamp_min(med_q)
    if n < MIN_LOCAL:
        s_eff = torch.full_like(typ, max(scale, pooled[1] if pooled else 0.0))
    else:
        s_eff = torch.clamp(TAIL * typ, max=scale)
    reduction, same_sign = (pooled.reduction, pooled.same_sign) if isinstance(pooled, RefStats) else (0, 0)
    scale_floor, rel_floor = accumulation_floors(reduction, same_sign, cfg.tol_scale)
    atol_b = torch.clamp_min(torch.maximum(cfg.tol_factor * lev, scale_floor * s_eff), cfg.tol_floor)
    scan = pooled.scan if isinstance(pooled, RefStats) else SCAN_NONE
    if scan != SCAN_NONE and n >= MIN_LOCAL:  # a running sum: the rounding its accumulator carries
        atol_b = torch.maximum(atol_b, scan_allowance(f64, tuple(r64.shape), block, scan, reduction, scale).to(atol_b))
    rtol_b = torch.clamp_min(cfg.tol_factor * rl, rel_floor)
    atol = float(torch.maximum(atol_b, rtol_b * scale).max()) if atol_b.numel() else cfg.tol_floor
    return Budget(atol=atol, rtol=0.0, kind="float64", ref_err=err, scale=scale, alt=r32, block=block,
                  atol_b=atol_b.to(torch.float32), rtol_b=rtol_b.to(torch.float32), s_eff=s_eff.to(torch.float32),
                  err_level=med_e, reduction=reduction)


def scan_allowance(f64: torch.Tensor, shape: tuple, block: int, scan: int, length: int,
                   scale: float) -> torch.Tensor:
    """Per block, the error a running sum computed in fp32 in any honest order may carry: an element carries the
    rounding of every partial sum before it on its line, about EPS32 x sqrt(sum of the line's squared partial
    sums) (an accumulator that made an excursion and came back near zero carries the excursion's rounding into
    blocks whose own values are small), ``SCAN_SPREAD`` times that. Along the rows (``SCAN_ROWS``): each row's
    own sum of squares, over the whole row (a reversed scan runs the other way); along another dimension or one
    no longer known: the bound sqrt(``length``) x the output's ``scale`` for every block. ``f64``: the float64
    output, flat."""
    n = f64.numel()
    nb = -(-n // block)
    last = int(shape[-1]) if len(shape) else n
    if scan != SCAN_ROWS or last <= 0 or n % last:
        return torch.full((nb,), SCAN_SPREAD * EPS32 * math.sqrt(max(length, 1)) * scale, dtype=torch.float64)
    rows = n // last
    per = max(1, CHUNK // last)
    parts = []
    for r in range(0, rows, per):
        v = _finite_abs(f64[r * last:min(rows, r + per) * last].to(torch.float64)).view(-1, last)
        parts.append((v * v).sum(1).cpu())
    row = SCAN_SPREAD * EPS32 * torch.sqrt(torch.cat(parts))
    b = torch.arange(nb, dtype=torch.int64)
    if block <= last:  # a row cut into blocks: a block lies on at most two rows
        first = (b * block) // last
        end = (torch.clamp((b + 1) * block, max=n) - 1) // last
        return torch.maximum(row[first], row[end])
    k = block // last  # short rows: a block is k whole rows (block_size), the last one maybe fewer
    return torch.cat([row, row.new_zeros(nb * k - rows)]).view(nb, k).amax(1)


def error_and_scale(r32: torch.Tensor, r64: torch.Tensor) -> tuple[float, float]:
    """(the fp32 reference's largest error against float64, the largest finite |float64 value|), chunked."""
    f32, f64 = r32.detach().reshape(-1), r64.detach().reshape(-1)
    chunk = 1 << 24
    err, scale = 0.0, 0.0
    for s in range(0, f32.numel(), chunk):
        a = f32[s:s + chunk].double()
        b = f64[s:s + chunk].to(a.device).double()
        d = (a - b).abs()
        d = d[torch.isfinite(d)]
        if d.numel():
            err = max(err, float(d.max()))
        scale = max(scale, _finite_max_abs(b))
    return err, scale


# plan.float64's word for a task whose outputs are float64 and computed in float64 throughout (no float64 copy
# to make: the reference is the truth), and the tolerance such an output gets, relative to its own scale: float32
# arithmetic anywhere on the way errs by ~6e-8 of a value (half an ulp of its last store alone), honest float64
# by ~1e-16 a step (1e-13 after a million-term sum; an ill-conditioned solve amplifies it by its condition number)
FLOAT64_OWN = "float64 output (the reference computes in float64 throughout)"
F64_TOL = 1e-8


def float64_budget(r: torch.Tensor) -> Budget:
    """The budget of a float64 output of a task that computes in float64 (``RefStats.wide``): every element within
    F64_TOL of itself and F64_TOL of the output's largest finite |value|. The fixed fp32 tolerance (1e-4) let a
    kernel that computed a float64 task in float32 (``expf``, float accumulators) pass with a speedup
    (docs/ANTI_CHEAT.md class 57)."""
    scale = _finite_max_abs(r)
    return Budget(F64_TOL * scale, F64_TOL, "fp64", scale=scale)


def fixed_budget(dtype: torch.dtype, cfg, ref_mod) -> Budget:
    """The task's ATOL / RTOL if it states them, else the config's fixed numbers for the dtype."""
    if hasattr(ref_mod, "ATOL") or hasattr(ref_mod, "RTOL"):
        return Budget(float(getattr(ref_mod, "ATOL", cfg.atol_fp32)), float(getattr(ref_mod, "RTOL", cfg.rtol_fp32)),
                      "task")
    if dtype in LOW_PRECISION:
        return Budget(cfg.atol_low, cfg.rtol_low, "fixed")
    return Budget(cfg.atol_fp32, cfg.rtol_fp32, "fixed")


def budget_for(r32: torch.Tensor, r64: torch.Tensor | None, cfg, ref_mod,
               pooled: tuple | None = None) -> tuple[Budget, torch.Tensor]:
    """The budget of one output and the tensor to compare against: the float64 reference where measured (an
    exact-valued output: exactly, the fp32 reference's value accepted too); integer and boolean outputs must
    match exactly (the float64 run's value or the fp32 reference's, where both exist)."""
    task_tol = hasattr(ref_mod, "ATOL") or hasattr(ref_mod, "RTOL")
    same = r64 is not None and r64.shape == r32.shape
    if not r32.is_floating_point():
        if same and not r64.is_floating_point() and not r64.is_complex():
            return exact_budget(r32, r64, cfg), r64
        return Budget(0.0, 0.0, "exact"), r32
    if r32.dtype == torch.float64 and getattr(pooled, "wide", False) and not task_tol:
        return float64_budget(r32), r32
    if same and r32.dtype == torch.float32 and r64.dtype == torch.float64 and not task_tol:
        m32 = _lattice_bits(r32)
        if m32 is not None and _lattice_bits(r64) is not None:
            return exact_budget(r32, r64, cfg), r64
        return measured_budget(r32, r64, cfg, pooled), r64
    return fixed_budget(r32.dtype, cfg, ref_mod), r32


def compare(o: torch.Tensor, truth: torch.Tensor, budget: Budget) -> dict:
    """``budget.compare`` (the comparison of one output, chunked)."""
    return budget.compare(o, truth)


STEP_SAMPLE = 1 << 16  # bad elements whose errors whole_steps looks at


def whole_steps(err: torch.Tensor) -> bool:
    """Whether the errors of the bad elements are whole multiples of one step (a floor written as a truncation,
    an index off by one on an integer-spaced table): all within 0.1% of an integer multiple of the smallest one.
    Rounding errors of fewer bits take every value in between."""
    err = err[err > 0]
    if err.numel() < 16:
        return False
    q = err.to(torch.float64) / err.min().to(torch.float64)
    return bool(((q - torch.round(q)).abs() <= 1e-3 * q).all())
