"""How close an fp32 output must be: a tolerance measured from the computation, not a fixed number.

The reference runs twice in the verifier's process: as the task wrote it (fp32) and in float64 (the same
weights and inputs, widened). The float64 output is the truth a candidate is compared with; the fp32
reference's own distance from it (``ref_err``) says how much error an honest fp32 implementation of this
computation makes. A candidate's output passes where, for every element,

    |out - ref64| <= max(tol_floor, tol_factor * ref_err, tol_scale * scale)

with ``scale`` the largest finite |ref64| of that output. The two terms cover the two ways honest fp32 code
differs from torch's (measured in bench/results/tolerance_cpu.md, ``bench/bench_tolerance.py``):

- ``tol_factor * ref_err`` (64): another accumulation order of the same reduction. A tiled or atomics-based
  GPU reduction is 2-15x the reference's own error; a float16 / TF32 / bfloat16 computation is 870x and more.
- ``tol_scale * scale`` (8e-5): long sequential accumulations, where torch's reference is far more accurate
  than a plain loop (torch sums pairwise on the cpu and in trees on the GPU): a one-thread sum of 1M
  elements is 2.6e-5 of the output's scale, a sequential cumsum of 32768 7e-6, a K = 8192 dot product
  4.6e-6; fp16 arithmetic is 2e-4 of the scale or more, bfloat16 1.5e-3 or more.

Precision lowering is therefore caught at any size (C13), and honest long reductions pass at any size up to
about 16M sequentially accumulated terms per output. Not covered: float64 and low-precision (fp16/bf16)
outputs keep the fixed tolerances of VerifyConfig (atol_low / rtol_low) and a task's own ATOL / RTOL wins.
A reference that does not run in float64, or whose float64 copy does not fit the device, falls back to the
fixed fp32 tolerance (``atol_fp32`` / ``rtol_fp32``) and says so in ``Verdict.versions["tolerance"]``.

``reference_numerics`` switches off TF32 for the fp32 reference (cuDNN convolutions use TF32 by default):
the reference is an fp32 computation, so TF32 in a candidate is lowering, not a match.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

LOW_PRECISION = (torch.float16, torch.bfloat16)
# the error band of reduced-precision arithmetic, as a share of the output's scale: above the budget and
# below this, with many elements off, the error is rounding of fewer mantissa bits rather than a logic bug
LOWERING_BAND = 2e-2
LOWERING_MIN_SHARE = 0.01


def reference_numerics() -> None:
    """fp32 means fp32 for the reference: no TF32 in matmuls or cuDNN convolutions. Set in every process
    that computes a reference (the verifier and the execution child, before its tamper snapshot)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def widen(obj):
    """Floating tensors (and lists / tuples of them) as float64; everything else unchanged."""
    if isinstance(obj, torch.Tensor):
        return obj.double() if obj.is_floating_point() else obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(widen(o) for o in obj)
    return obj


def float64_model(model: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy of the reference (same weights and buffers, widened exactly)."""
    return copy.deepcopy(model).double()


@dataclass
class Budget:
    """The tolerance of one output: ``atol`` / ``rtol`` against ``truth``; ``kind`` says where it came from
    (float64: measured; fixed: the config's numbers; task: the task's own ATOL / RTOL)."""

    atol: float
    rtol: float
    kind: str
    ref_err: float | None = None
    scale: float | None = None

    def describe(self) -> str:
        if self.kind != "float64":
            return f"{self.kind} tolerance atol {self.atol:.3g}, rtol {self.rtol:.3g}"
        return (f"measured tolerance {self.atol:.3g} (the fp32 reference's own error {self.ref_err:.3g} against "
                f"float64, output scale {self.scale:.3g})")


def _finite_max_abs(t: torch.Tensor) -> float:
    a = t.detach().abs()
    a = a[torch.isfinite(a)]
    return float(a.max()) if a.numel() else 0.0


def measured_budget(r32: torch.Tensor, r64: torch.Tensor, cfg, pooled: tuple[float, float] | None = None) -> Budget:
    """The budget of one fp32 output from the reference's own error against its float64 twin (chunked: a
    6 GB output is measured in pieces). ``pooled``: (error, scale) seen on other draws of the same task (the
    plan's two): the budget takes the larger, so an output of a few elements (a sum to 4 numbers) does not
    get a tight budget from one draw whose sums happen to be small."""
    err, scale = error_and_scale(r32, r64)
    if pooled:
        err, scale = max(err, pooled[0]), max(scale, pooled[1])
    atol = max(cfg.tol_floor, cfg.tol_factor * err, cfg.tol_scale * scale)
    return Budget(atol=atol, rtol=0.0, kind="float64", ref_err=err, scale=scale)


def error_and_scale(r32: torch.Tensor, r64: torch.Tensor) -> tuple[float, float]:
    """(the fp32 reference's largest error against float64, the largest finite |float64 value|), chunked."""
    f32, f64 = r32.reshape(-1), r64.reshape(-1)
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


def fixed_budget(dtype: torch.dtype, cfg, ref_mod) -> Budget:
    """The task's ATOL / RTOL if it states them, else the config's fixed numbers for the dtype."""
    if hasattr(ref_mod, "ATOL") or hasattr(ref_mod, "RTOL"):
        return Budget(float(getattr(ref_mod, "ATOL", cfg.atol_fp32)), float(getattr(ref_mod, "RTOL", cfg.rtol_fp32)),
                      "task")
    if dtype in LOW_PRECISION:
        return Budget(cfg.atol_low, cfg.rtol_low, "fixed")
    return Budget(cfg.atol_fp32, cfg.rtol_fp32, "fixed")


def budget_for(r32: torch.Tensor, r64: torch.Tensor | None, cfg, ref_mod,
               pooled: tuple[float, float] | None = None) -> tuple[Budget, torch.Tensor]:
    """The budget of one output and the tensor to compare against (the float64 reference where measured;
    integer and boolean outputs must match exactly)."""
    if not r32.is_floating_point():
        return Budget(0.0, 0.0, "exact"), r32
    if (r64 is not None and r32.dtype == torch.float32 and r64.dtype == torch.float64 and r64.shape == r32.shape
            and not (hasattr(ref_mod, "ATOL") or hasattr(ref_mod, "RTOL"))):
        return measured_budget(r32, r64, cfg, pooled), r64
    return fixed_budget(r32.dtype, cfg, ref_mod), r32


def looks_lowered(m: dict, b: Budget, r: torch.Tensor) -> bool:
    """An fp32 output that misses its budget by the error of fewer mantissa bits: above the budget on at least
    1% of the elements, and within 2% of the output's scale (a logic bug is usually far larger)."""
    if r.dtype not in (torch.float32, torch.float64) or not m["n_bad"]:
        return False
    scale = b.scale if b.scale is not None else _finite_max_abs(r)
    return (m["max_abs"] == m["max_abs"] and m["max_abs"] <= LOWERING_BAND * max(scale, 1e-30)
            and m["n_bad"] >= LOWERING_MIN_SHARE * m["numel"])
