"""Naming an fp32 output that missed its budget (verifier/judge/numerics.py measures the budget and compares):
a lowering of precision, C13 (``looks_lowered``: the error of fewer mantissa bits, on many elements, not
systematic), or a logic error, which is plain ``wrong`` (``error_follows_inputs``: the error is an input or one
slice of it, element by element: a scan written exclusive, a reduction dropping a term). Read by
verifier/judge/outputs.py after a comparison failed. Imports: torch and numerics.
"""

from __future__ import annotations

import torch

from verifier.judge.numerics import (
    CHUNK,
    LOWERING_BAND,
    LOWERING_MIN_SHARE,
    MIN_LOCAL,
    SYSTEMATIC_FIT,
    Budget,
)


def looks_lowered(m: dict, b: Budget, r: torch.Tensor) -> bool:
    """An fp32 output that misses its budget by the error of fewer mantissa bits: over budget on at least 1% of
    the elements where the budget leaves room to see a lowering (its allowance below LOWERING_BAND of the
    element's scale: not the elements that only the floor judges), every bad element within LOWERING_BAND of its
    local scale or all of them within LOWERING_BAND of the output's scale (crude approximations of a
    transcendental), none inf or NaN, and the error not systematic (an affine function of the value: a divisor
    off by one, a missing factor; or whole multiples of one step, ``whole_steps``: a floor written as a
    truncation). Exact-valued outputs are never lowering: they are off by whole steps. The
    caller also rules out errors that follow an input (``error_follows_inputs``: a term missing, an index off by
    one)."""
    if b.kind == "exact" or r.dtype not in (torch.float32, torch.float64) or not m["n_bad"]:
        return False
    in_band = m.get("n_band", 0) == m["n_bad"] or m.get("max_bad", float("inf")) <= LOWERING_BAND * m.get("scale", 0.0)
    return (m["n_bad"] >= LOWERING_MIN_SHARE * max(m.get("n_visible", m["numel"]), 1) and in_band
            and not m.get("n_nonfinite", 0) and m.get("fit", 0.0) < SYSTEMATIC_FIT and not m.get("whole_steps"))


def error_follows_inputs(o: torch.Tensor, truth: torch.Tensor, inputs: list, limit: float = 0.95) -> bool:
    """Whether the error ``o - truth`` follows an input element by element (|correlation| >= ``limit``): an
    input of the same size (an inclusive scan written exclusive: the error is the input), or one slice of a
    larger input seen as ``[outputs, K]`` or ``[K, outputs]`` (a reduction that drops its first or last term, or
    reads one term twice: the error is that column). Rounding errors do not follow any input: a lowering's error
    is at most 0.87 correlated with its own value (truncation toward zero). Chunked over the output."""
    n = o.numel()
    xs = [x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point() and n >= MIN_LOCAL
          and x.numel() % n == 0 and x.numel() // n <= 1 << 16]
    if not xs:
        return False
    of, tf = o.reshape(-1), truth.reshape(-1)

    def error(s: int, e: int) -> torch.Tensor:
        d = of[s:e].to(torch.float64) - tf[s:e].to(of.device).to(torch.float64)
        return d.masked_fill_(~torch.isfinite(d), 0.0)

    sd = sdd = 0.0
    for s in range(0, n, CHUNK):
        d = error(s, s + CHUNK)
        sd, sdd = sd + float(d.sum()), sdd + float((d * d).sum())
    var_d = sdd - sd * sd / n
    if var_d <= 0:
        return False
    for x in xs:
        k = x.numel() // n
        views = [x.reshape(n, k)] + ([x.reshape(k, n).t()] if k > 1 else [])
        for v in views:
            sxy = torch.zeros(k, dtype=torch.float64)
            sx = torch.zeros(k, dtype=torch.float64)
            sxx = torch.zeros(k, dtype=torch.float64)
            step = max(1, CHUNK // k)
            for s in range(0, n, step):
                c = v[s:s + step].to(of.device).to(torch.float64)
                c = c.masked_fill_(~torch.isfinite(c), 0.0)
                sxy += (error(s, s + step)[:, None] * c).sum(0).cpu()
                sx += c.sum(0).cpu()
                sxx += (c * c).sum(0).cpu()
            var_x = sxx - sx * sx / n
            cov = sxy - sx * sd / n
            corr = cov.abs() / torch.sqrt(var_x.clamp_min(1e-300) * var_d)
            if bool(((corr >= limit) & (var_x > 0)).any()):
                return True
    return False
