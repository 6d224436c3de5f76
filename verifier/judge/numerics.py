"""How close an fp32 output must be: a tolerance measured from the computation, per element, not a fixed number.
This module holds the ``Budget`` (one output's tolerance, per element) and its comparison; verifier/judge/budgets.py
measures a Budget from the reference's runs (``budget_for``).

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
- one-pass variances (``Budget.rel_e``, verifier/judge/budgets.py ``variance_floor``): a normalisation kernel that
  takes a group's variance as E[x^2] - E[x]^2 from one pass of running sums errs relative to the variance by the
  sums' error times E[x^2] / Var of the group (a channel whose mean lies far from zero). Where a training batch
  norm, a layer or group norm or a var / std lies on an output's way, each element's relative floor is the
  same-sign floor of its op's length x that ratio for the element's group (at most ``KAPPA_MAX``), recorded by
  the judged float64 run itself (verifier/judge/reduction.py ``variance_lengths``, verifier/judge/outputs.py
  ``reference64_judged``): per element, so the channels near zero mean keep the tight floor and an fp16 output
  or TF32 products still miss on most elements (C13; tests/redteam/test_redteam_one_pass_variance.py). Where an
  op mixes or moves those elements (a matmul or a convolution after the norm, a permutation, a pooling), the
  largest of them goes on as a floor of the scale term (``Budget.folded``, ``Reduction.folded``): the
  contraction's sum is off by the normalised values' relative error times the output's typical size, not each
  output's own. Where every channel lies far from zero mean (mean / std of 7 and more over thousands of rows), an
  honest one-pass variance errs as much as an fp16 output does, and the two cannot be told apart from outputs.

Outputs of fewer than ``MIN_LOCAL`` elements (a sum to 4 numbers) have no neighbourhood to measure: one block,
scale ``max(S, the scale seen on the plan's other draws)`` (``pooled``), no cap.

Exact-valued outputs (integer and boolean dtypes; fp32 outputs whose values all lie on a lattice of 2^-m, m <=
``LATTICE_BITS``, below 2^24 units in both runs: floor, round, sign, comparisons, argmax, counts) are compared
exactly: each element must equal the float64 value or the fp32 reference's value (an index output of a selection,
topk / sort / argmax, first has its valid choices among tied values made the reference's: verifier/common/ties.py,
``outputs.resolve_ties``, ``Budget.accepts``); an element where the two differ
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
CHUNK = 1 << 24  # elements handled at a time (a 6 GB output is measured and compared in pieces)


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


def aligned_chunk(block: int) -> int:
    return max(block, (CHUNK // max(block, 1)) * block)


def same_special(c: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Elements where ``c`` has the non-finite value ``r`` has (NaN for NaN, the same infinity)."""
    return (torch.isnan(c) & torch.isnan(r)) | (torch.isinf(r) & (c == r))


def broadcast_take(small: torch.Tensor, shape: tuple, flat_idx: torch.Tensor) -> torch.Tensor:
    """The values of ``small`` broadcast to ``shape`` at the flat (row-major) indices ``flat_idx``, float64 on their
    device, without making the broadcast tensor."""
    small = small.reshape((1,) * (len(shape) - small.dim()) + tuple(small.shape)).contiguous()
    flat_small = small.reshape(-1).to(flat_idx.device).to(torch.float64)
    if small.numel() == 1:
        return flat_small.expand(flat_idx.shape)
    offset = torch.zeros_like(flat_idx)
    rest, stride = flat_idx, 1
    for d in range(len(shape) - 1, -1, -1):
        coord = torch.remainder(rest, shape[d])
        rest = torch.div(rest, shape[d], rounding_mode="floor")
        if small.shape[d] != 1:
            offset += coord * stride
        stride *= small.shape[d]
    return flat_small[offset]


def finite_abs(t: torch.Tensor) -> torch.Tensor:
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
    # a relative floor per element (a one-pass variance's, budgets.py ``variance_floor``): float32, broadcastable
    # to ``shape`` (the output's), or None
    rel_e: torch.Tensor | None = None
    shape: tuple = ()
    folded: float = 0.0  # a one-pass variance's floor as a share of the scale, after a contraction (raises atol_b)

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
        if self.rel_e is not None:
            hi_r = max(hi_r, float(self.rel_e.max()))
        return (f"measured tolerance per element, the larger of {lo_a:.3g}..{hi_a:.3g} and {lo_r:.3g}..{hi_r:.3g} x "
                f"|value| per row (the fp32 reference's own error against float64: median {self.err_level:.3g}, "
                f"largest {self.ref_err:.3g}; output scale {self.scale:.3g}"
                + (f"; floors for a {self.reduction}-term reduction" if self.reduction > 1 else "")
                + (f"; a one-pass variance's floor of {self.folded:.3g} x the scale on its way" if self.folded else "")
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
        if self.rel_e is not None:
            flat = torch.arange(lo, lo + n, device=a.device)
            out = torch.maximum(out, a * broadcast_take(self.rel_e, self.shape, flat))
        return out

    def _allow_at(self, flat_idx: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        if self.kind != "float64":
            return a * self.rtol + self.atol
        out = torch.maximum(self._gather(self.atol_b, flat_idx), self._gather(self.rtol_b, flat_idx) * a)
        if self.rel_e is not None:
            out = torch.maximum(out, a * broadcast_take(self.rel_e, self.shape, flat_idx))
        return out

    def _scale_at(self, flat_idx: torch.Tensor, a: torch.Tensor, whole: float) -> torch.Tensor:
        """The scale an element's lowering error is measured against: max(|r64_i|, S_b) (fixed kinds: the
        output's largest |value|, ``whole``)."""
        if self.kind != "float64":
            return torch.full_like(a, whole)
        return torch.maximum(a, self._gather(self.s_eff, flat_idx))

    def accepts(self, o: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
        """Per element of ``o`` (``truth``'s shape), whether this budget accepts it: within the allowance of the
        float64 value or of the fp32 reference's (exact: equal to one of them), the same non-finite value counted
        equal. Whole, not in chunks: for the values an index output selects (verifier/common/ties.py), not for a
        several-GB output (``compare`` is)."""
        c = o.reshape(-1).to(torch.float64)
        r = truth.reshape(-1).to(c.device).to(torch.float64)
        allow = torch.zeros_like(r) if self.kind == "exact" else self.allowance(0, finite_abs(r))
        ok = same_special(c, r) | ((c - r).abs() <= allow)
        if self.alt is not None:
            alt = self.alt.reshape(-1).to(c.device).to(torch.float64)
            ok |= same_special(c, alt) | ((c - alt).abs() <= allow)
        return ok.reshape(o.shape)

    def compare(self, o: torch.Tensor, truth: torch.Tensor) -> dict:
        """Where and how much ``o`` misses this budget (same shape as ``truth``), in chunks: ``n_bad`` elements
        over budget of ``numel``, ``max_abs`` / ``max_rel`` the largest error against the nearest accepted
        answer, ``max_over`` the largest error of a bad element over its allowance (inf where it has none: an
        exact output, a non-finite value), the first bad element (``first_index``, ``got``, ``expected``), and what
        looks_lowered reads
        (``n_band``: bad elements within LOWERING_BAND of their scale, ``max_bad``, ``n_nonfinite``: bad elements
        that are inf or NaN, ``n_visible``: elements whose allowance is below LOWERING_BAND of their scale,
        ``fit``: how much of the error an affine function of the value explains). One pass; a second one over
        a failing output only."""
        of, tf = o.reshape(-1), truth.reshape(-1)
        af = self.alt.reshape(-1) if self.alt is not None else None
        n = of.numel()
        out = {"n_bad": 0, "numel": n, "max_abs": 0.0, "max_rel": 0.0, "n_band": 0, "n_nonfinite": 0, "fit": 0.0,
               "n_visible": 0, "max_bad": 0.0, "scale": 0.0, "max_over": 0.0}
        exact = self.kind == "exact"
        whole = 0.0
        if self.kind not in ("float64", "exact"):
            whole = self.scale if self.scale is not None else finite_max_abs(truth)
        out["scale"] = whole if self.kind != "float64" else float(self.scale or 0.0)
        flips, flip_far, first = 0, False, None
        samples: list = []  # a sample of the bad elements' errors (whole steps or rounding?)
        step = aligned_chunk(self.block) if self.kind == "float64" else CHUNK
        for s in range(0, n, step):
            c = of[s:s + step].to(torch.float64)
            r = tf[s:s + step].to(c.device).to(torch.float64)
            d = (c - r).abs_()
            a = finite_abs(r)
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
            special = same_special(ci, ri)
            allow = torch.zeros_like(ai) if exact else self._allow_at(idx + s, ai)
            okr = special | (di <= allow)
            err = torch.where(special, torch.zeros_like(di), di)
            if af is not None:
                alti = af[s:s + step].to(c.device)[idx].to(torch.float64)
                d2 = (ci - alti).abs()
                special2 = same_special(ci, alti)
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
            # how far over: the largest error of a bad element over its allowance (inf where none is allowed)
            over = err[bad] / allow[bad]
            out["max_over"] = max(out["max_over"], float(over.max()) if bool(torch.isfinite(over).all())
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
        step = aligned_chunk(self.block) if self.kind == "float64" else CHUNK
        for s in range(0, of.numel(), step):
            c = of[s:s + step].to(torch.float64)
            r = tf[s:s + step].to(c.device).to(torch.float64)
            a = finite_abs(r)
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


def finite_max_abs(t: torch.Tensor) -> float:
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


FLOAT64_OWN = "float64 output (the reference computes in float64 throughout)"
F64_TOL = 1e-8


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
