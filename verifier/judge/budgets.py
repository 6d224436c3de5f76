"""Where an output's tolerance comes from (the ``Budget`` that verifier/judge/numerics.py compares with): measured
per element from the fp32 reference's distance to its float64 run (``measured_budget``, with the floors of long
reductions and running sums: ``scan_allowance``), exact for exact-valued outputs (``exact_budget``), float64
rounding for a task that computes in float64 throughout (``float64_budget``), or the config's fixed numbers
(``fixed_budget``); ``budget_for`` picks one. The terms and the reasons for each are in numerics.py's docstring."""

from __future__ import annotations

import math

import torch

from verifier.judge.numerics import (CHUNK, F64_TOL, LOW_PRECISION, LOWERING_MIN_SHARE, MIN_LOCAL, TAIL, Budget,
                                     aligned_chunk, block_size, finite_abs, finite_max_abs, same_special)
from verifier.judge.reduction import (ACC_LINEAR, EPS32, SCAN_NONE, SCAN_ROWS, RefStats, accumulation_floors,
                                      fits_shape)

LATTICE_BITS = 8  # exact-valued outputs: multiples of 2^-m, m <= this ...
LATTICE_LIMIT = float(1 << 24)  # ... below 2^24 units (exactly representable in fp32)
# a running sum's allowance over EPS32 x sqrt(sum of its line's squared partial sums): an honest sequential fp32
# scan's largest error reached 1.7 of it (2,560 rows of 4096..65536 normals, excursions, positive terms), an
# fp16-input scan of normals exceeds 4 x on most elements (bench/results/scan_budget_cpu.md)
SCAN_SPREAD = 4.0


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
        differ = ~same_special(xi, yi) & torch.isfinite(xi) & torch.isfinite(yi)
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
    step = aligned_chunk(block)
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
    reduction, same_sign, folded = (pooled.reduction, pooled.same_sign, float(pooled.folded)) \
        if isinstance(pooled, RefStats) else (0, 0, 0.0)
    scale_floor, rel_floor = accumulation_floors(reduction, same_sign, cfg.tol_scale)
    scale_floor = max(scale_floor, folded)  # a one-pass variance's floor after a contraction (Reduction.folded)
    atol_b = torch.clamp_min(torch.maximum(cfg.tol_factor * lev, scale_floor * s_eff), cfg.tol_floor)
    scan = pooled.scan if isinstance(pooled, RefStats) else SCAN_NONE
    if scan != SCAN_NONE and n >= MIN_LOCAL:  # a running sum: the rounding its accumulator carries
        atol_b = torch.maximum(atol_b, scan_allowance(f64, tuple(r64.shape), block, scan, reduction, scale).to(atol_b))
    rtol_b = torch.clamp_min(cfg.tol_factor * rl, rel_floor)
    atol = float(torch.maximum(atol_b, rtol_b * scale).max()) if atol_b.numel() else cfg.tol_floor
    spread = variance_floor(pooled, tuple(r32.shape))
    if spread is not None:
        atol = max(atol, float(spread.max()) * scale)
    return Budget(atol=atol, rtol=0.0, kind="float64", ref_err=err, scale=scale, alt=r32, block=block,
                  atol_b=atol_b.to(torch.float32), rtol_b=rtol_b.to(torch.float32), s_eff=s_eff.to(torch.float32),
                  err_level=med_e, reduction=reduction, rel_e=spread, shape=tuple(r32.shape), folded=folded)


def variance_floor(pooled, shape: tuple) -> torch.Tensor | None:
    """The relative floor per element where a one-pass variance lies on the output's way (``RefStats.spread``:
    its same-sign length per element, x ACC_LINEAR x EPS32, the same-sign floor of ``accumulation_floors``),
    broadcastable to ``shape``; None where none does or the record does not fit this shape (another shape's
    trial: its statistics' groups are not the plan's)."""
    spread = getattr(pooled, "spread", None)
    if not isinstance(spread, torch.Tensor) or not fits_shape(spread, shape):
        return None
    return (ACC_LINEAR * EPS32 * spread.to(torch.float64)).to(torch.float32)


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
        v = finite_abs(f64[r * last:min(rows, r + per) * last].to(torch.float64)).view(-1, last)
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
        scale = max(scale, finite_max_abs(b))
    return err, scale


# plan.float64's word for a task whose outputs are float64 and computed in float64 throughout (no float64 copy
# to make: the reference is the truth), and the tolerance such an output gets, relative to its own scale: float32
# arithmetic anywhere on the way errs by ~6e-8 of a value (half an ulp of its last store alone), honest float64
# by ~1e-16 a step (1e-13 after a million-term sum; an ill-conditioned solve amplifies it by its condition number)
def float64_budget(r: torch.Tensor) -> Budget:
    """The budget of a float64 output of a task that computes in float64 (``RefStats.wide``): every element within
    F64_TOL of itself and F64_TOL of the output's largest finite |value|. The fixed fp32 tolerance (1e-4) let a
    kernel that computed a float64 task in float32 (``expf``, float accumulators) pass with a speedup
    (docs/ANTI_CHEAT.md class 57)."""
    scale = finite_max_abs(r)
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
