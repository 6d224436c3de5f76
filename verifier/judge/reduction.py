"""How many terms are summed on the way to each output of the reference: the reduction length that sets the
accumulation error an honest fp32 kernel may make (verifier/judge/numerics.py turns it into a floor of the budget).

A sequential fp32 accumulation over K terms (one accumulator per output, the textbook tiled matmul, a one-pass
row sum) errs by about eps32 x sqrt(K) of the output's scale on zero-mean terms, and on same-sign terms by a
share of eps32 x K of the sum itself: past K ~ 5e5 positive products it misses the fixed relative floor
(``tol_scale``) on every element while a bf16 lowering of the same sum is within it
(bench/results/accumulation_budget_cpu.md). The budget is measured against the fp32 *reference*, whose BLAS or
pairwise order is far more accurate than an honest kernel's; the floor from K closes that gap without loosening
short reductions, where the fixed floor is what catches a lowering.

Whether the terms share one sign decides how the error grows: a sum of K positive products (torch.rand
inputs, a softmax's exponentials, a variance's squares) errs in proportion to K, a zero-mean one in proportion to
sqrt(K); a floor linear in K on a cancelling sum would let a lowering through (an fp16-input sum of 1M normals).

``ReductionTracker`` is a dispatch mode run over the plan's float64 reference pass (the verifier's process, the
task's own program): every tensor an op returns carries the longest reduction on its way and the longest whose
terms share one sign (the op's own, from the contracted size of mm / bmm / conv / attention and the reduced size
of sum / mean / norm / softmax / cumsum, with the signs of its operands; or the longest of its inputs'), and
``reductions(outputs)`` reads each output's. Views and copies pass them on; an op it does not know is
elementwise. It also marks where a running sum (``cumsum``) lies on an output's way while the values stay partial
sums (``Reduction.scan``: the rounding its accumulator carries, verifier/judge/budgets.py ``scan_allowance``).
Never run over the candidate's code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakTensorKeyDictionary

aten = torch.ops.aten


def _numel(shape) -> int:
    return math.prod(int(s) for s in shape)


def _dims(x: torch.Tensor, dim) -> int:
    """The number of elements one reduction over ``dim`` (None / [] = every dimension) combines."""
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):
        return max(1, x.numel())
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    return max(1, _numel(x.shape[d] for d in dims)) if x.dim() else 1


def _contracted(func, args, kwargs, out) -> int:
    """mm, bmm, conv and attention: the flop count over two flops per output element (K of a matmul,
    C_in / groups x the kernel's size of a convolution), from torch's own flop formulas."""
    from torch.utils.flop_counter import flop_registry
    formula = flop_registry.get(func._overloadpacket)
    first = out[0] if isinstance(out, (tuple, list)) else out
    if formula is None or not isinstance(first, torch.Tensor) or not first.numel():
        return 0
    try:
        flops = formula(*args, **kwargs, out_val=out)
    except Exception:  # noqa: BLE001 - a formula that does not take this overload: no length from it
        return 0
    return max(1, int(flops) // (2 * first.numel()))


def _one_sign(*tensors) -> bool:
    """Whether every element of these tensors has one sign (all >= 0, or all <= 0): their products and sums do
    not cancel."""
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.numel() and t.is_floating_point():
            lo, hi = torch.aminmax(t.detach())
            if float(lo) < 0 < float(hi):
                return False
    return True


def _op_length(func, args, kwargs, out) -> tuple[int, bool]:
    """(the reduction length of one aten call, 1 for an elementwise op or a view; whether its terms share one
    sign, so that the accumulated sum grows with the length instead of cancelling)."""
    packet = func._overloadpacket
    x = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if x is None:
        return 1, False
    if "attention" in packet.__name__ and len(args) > 2 and all(isinstance(t, torch.Tensor) for t in args[:3]):
        # q.k over the head dim (mixed signs), softmax (exp: one sign) and p.v over the keys
        return max(1, int(x.shape[-1]), int(args[1].shape[-2])), _one_sign(args[2])
    k = _contracted(func, args, kwargs, out)
    if k:  # mm, addmm (bias, a, b), bmm, baddbmm, convolution (input, weight, bias)
        operands = args[1:3] if packet in (aten.addmm, aten.baddbmm) else args[:2]
        return k, _one_sign(*operands)
    if packet in (aten.mv, aten.addmv, aten.dot, aten.vdot):
        operands = args[1:3] if packet is aten.addmv else args[:2]
        return max(1, int(operands[0].shape[-1])), _one_sign(*operands)
    if packet in SQUARES:
        at = 2 if packet in (aten.linalg_vector_norm, aten.norm) else 1  # norms: (self, ord, dim, ...)
        dim = args[at] if len(args) > at else kwargs.get("dim")
        return _dims(x, dim), True
    if packet in (aten.sum, aten.mean, aten.nansum, aten.nanmean, aten.prod, aten.count_nonzero, aten.cumsum,
                  aten.cumprod):
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        return _dims(x, dim), _one_sign(x)
    if packet is aten.native_layer_norm:
        return max(1, _numel(args[1])), True
    if packet is aten.native_group_norm:  # (input, weight, bias, N, C, HxW, group, eps)
        return max(1, int(args[4]) // max(1, int(args[6])) * int(args[5])), True
    if packet in (aten.native_batch_norm, aten._native_batch_norm_legit, aten._native_batch_norm_legit_functional,
                  aten._native_batch_norm_legit_no_training, aten.batch_norm):
        return (max(1, x.numel() // max(1, int(x.shape[1]))), True) if x.dim() > 1 else (1, False)
    if packet in (aten.mse_loss, aten.l1_loss, aten.smooth_l1_loss, aten.huber_loss, aten.nll_loss,
                  aten.nll_loss_forward, aten.binary_cross_entropy, aten.kl_div, aten.trace):
        return max(1, x.numel()), packet not in (aten.nll_loss, aten.nll_loss_forward, aten.kl_div, aten.trace)
    if packet in (aten.avg_pool1d, aten.avg_pool2d, aten.avg_pool3d, aten._adaptive_avg_pool2d,
                  aten._adaptive_avg_pool3d, aten.adaptive_avg_pool1d):
        first = out[0] if isinstance(out, (tuple, list)) else out
        return max(1, x.numel() // max(1, first.numel())), _one_sign(x)
    return 1, False


# reductions whose terms have one sign whatever the input (squares, exp, |x|)
SQUARES = (aten.var, aten.std, aten.var_mean, aten.std_mean, aten.logsumexp, aten.linalg_vector_norm, aten.norm,
           aten._softmax, aten._log_softmax, aten.softmax, aten.log_softmax, aten.logcumsumexp)


# where a running sum lies on an output's way, along its dimensions: none, along the output's last dimension (its
# rows: the budget's blocks), along another or one no longer known (a view since). A running product or
# log-sum-exp errs relative to its own value, which the relative term of the budget already measures.
SCAN_NONE, SCAN_ROWS, SCAN_OTHER = 0, 1, 2
SCANS = (aten.cumsum,)
# ops that move dimensions whatever the shapes say (a transpose of a square tensor keeps its shape)
MOVES_DIMS = (aten.transpose, aten.permute, aten.t, aten.swapaxes, aten.swapdims, aten.movedim, aten.numpy_T,
              aten.mT, aten.mH, aten.adjoint)


@dataclass(frozen=True)
class Reduction:
    """The longest reduction on an output's way (``length``), the longest one whose terms share one sign
    (``same_sign``: its error grows with the length, ``accumulation_floors``), where a scan lies on it
    (``scan``: SCAN_NONE, SCAN_ROWS, SCAN_OTHER), a one-pass variance's floor per element while the elements
    stay its own (``spread``) and, once an op mixed or moved them, its largest relative floor as a share of the
    output's scale (``folded``)."""

    length: int = 1
    same_sign: int = 0
    scan: int = SCAN_NONE
    # per element, a one-pass variance's same-sign length (``variance_lengths``): a float32 tensor on the CPU,
    # broadcastable to the tensor this record belongs to, or None
    spread: torch.Tensor | None = field(default=None, compare=False)
    # a scale-term floor (a share of the output's scale) from a ``spread`` that an op mixed or moved (``folded``)
    folded: float = 0.0

    def join(self, other: "Reduction") -> "Reduction":
        return Reduction(max(self.length, other.length), max(self.same_sign, other.same_sign),
                         max(self.scan, other.scan), _larger(self.spread, other.spread),
                         max(self.folded, other.folded))

    def through(self, func, src, out, values_kept: bool) -> "Reduction":
        """This record as it reaches ``out`` of ``func`` applied to ``src``. A running sum's mark stays only where
        the op keeps its values partial sums (``values_kept``: views, copies, sums and differences, a factor per
        row: ``_keeps_values``); elsewhere (an exp, a matmul) the values are no longer the sums whose rounding
        the budget's allowance measures, and the mark goes. Along the rows only where the op keeps the last
        dimension where it was; otherwise the scan's direction is no longer known. A one-pass variance's record
        per element goes on where the elements stay its own (``_spread_through``), else as ``folded``."""
        spread = _spread_through(self.spread, func, src, out)
        dropped = spread is None and self.spread is not None
        folded = max(self.folded, folded_floor(self.spread)) if dropped else self.folded
        if self.scan == SCAN_NONE or not values_kept:
            return Reduction(self.length, self.same_sign, SCAN_NONE, spread, folded)
        if self.scan != SCAN_ROWS:
            return Reduction(self.length, self.same_sign, self.scan, spread, folded)
        keeps = (isinstance(out, torch.Tensor) and out.dim() >= 1 and src.dim() >= 1
                 and out.shape[-1] == src.shape[-1] and func._overloadpacket not in MOVES_DIMS)
        return Reduction(self.length, self.same_sign, SCAN_ROWS if keeps else SCAN_OTHER, spread, folded)


def folded_floor(spread: torch.Tensor) -> float:
    """A one-pass variance's per-element record (its same-sign length: ``budgets.variance_floor`` makes it the
    relative floor ACC_LINEAR x EPS32 x it) once an op mixes or moves the elements it belongs to: its largest, as a
    share of the output's scale, ACC_FOLDED x EPS32 x it. A matmul or a convolution after a batch norm sums
    products of normalised values, each off by its channel's relative error: the sum is off by that error times a
    sum of the size of the output's typical value (the products' signs differ), not of each output's own value,
    which such a sum may cancel to near zero (an honest one-pass batch norm before a linear layer missed its
    allowance by 2x on elements of ordinary size before this floor, on inputs of mean / std 7)."""
    return float(ACC_FOLDED * EPS32 * float(spread.max())) if spread.numel() else 0.0


# ops whose outputs are their inputs' values, rearranged, added or subtracted (a running sum stays one)
KEEPS_VALUES = MOVES_DIMS + SCANS + (
    aten.view, aten.reshape, aten._unsafe_view, aten.expand, aten.unsqueeze, aten.squeeze, aten.slice,
    aten.select, aten.flip, aten.as_strided, aten.clone, aten.contiguous, aten._to_copy, aten.copy_, aten.copy,
    aten.cat, aten.stack, aten.index_select, aten.narrow, aten.unbind, aten.split, aten.split_with_sizes,
    aten.chunk, aten.alias, aten.detach, aten.lift_fresh, aten.add, aten.sub, aten.neg, aten.rsub, aten.pad,
    aten.constant_pad_nd, aten.roll, aten.unfold, aten.diff)
SCALES = (aten.mul, aten.div)  # a factor per row (a number, one value, or a last dimension of 1) keeps them too


def _keeps_values(func, args, kwargs) -> bool:
    packet = func._overloadpacket
    if packet in KEEPS_VALUES:
        return True
    if packet in SCALES:
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        return sum(1 for t in tensors if t.numel() > 1 and t.shape[-1] != 1) <= 1
    return False


def _scan_of(func, args, kwargs) -> int:
    """SCAN_ROWS / SCAN_OTHER for a scan along the last / another dimension of its input, else SCAN_NONE."""
    if func._overloadpacket not in SCANS or not args or not isinstance(args[0], torch.Tensor):
        return SCAN_NONE
    x = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    try:
        last = x.dim() <= 1 or int(dim) % x.dim() == x.dim() - 1
    except (TypeError, ValueError):
        return SCAN_OTHER
    return SCAN_ROWS if last else SCAN_OTHER


# a one-pass variance (E[x^2] - E[x]^2 from one pass of running sums, the usual model-written normalisation) errs
# relative to the variance by the sums' relative error times E[x^2] / Var, per group of its statistics (a
# channel's mean far from zero: kappa 24..48 on a Linear of torch.rand inputs); past KAPPA_MAX the formula is
# broken, not merely less accurate, and no more is allowed
KAPPA_MAX = 64.0
# the statistics ops: batch norm in training mode, layer and group norm, var / std
BATCH_NORMS = (aten.native_batch_norm, aten._native_batch_norm_legit, aten._native_batch_norm_legit_functional)
VARIANCES = (aten.var, aten.std, aten.var_mean, aten.std_mean)
# ops whose output is their input's elements, in place (a record broadcastable to the input fits the output)
SAME_ELEMENTS = (aten.clone, aten.contiguous, aten._to_copy, aten.copy_, aten.copy, aten.detach, aten.alias,
                 aten.lift_fresh)
RESHAPES = (aten.view, aten.reshape, aten._unsafe_view)
SPREAD_MAX = 1 << 24  # a per-element record expanded through a reshape at most this many elements


def _kappa(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    """E[x^2] / Var over ``dims`` (kept as size-1 dimensions), per group, within [1, KAPPA_MAX]."""
    var, mean = torch.var_mean(x.detach().to(torch.float64), dim=dims, correction=0, keepdim=True)
    k = torch.where(var > 0, 1.0 + mean * mean / var.clamp_min(1e-300), torch.full_like(var, KAPPA_MAX))
    return k.clamp(1.0, KAPPA_MAX)


def variance_lengths(func, args, kwargs, out, length: int) -> torch.Tensor | None:
    """Per element of a statistics op's (first) output, the same-sign length a one-pass variance of it behaves
    like: ``length`` x E[x^2] / Var of the element's group (a channel of a training batch norm, a row of a layer
    norm, a group of a group norm, the reduced elements of var / std), float32 on the CPU, broadcastable to the
    output; None for another op or an eval batch norm (running statistics: no sums)."""
    packet = func._overloadpacket
    x = args[0] if args and isinstance(args[0], torch.Tensor) else None
    first = out[0] if isinstance(out, (tuple, list)) else out
    if x is None or not x.is_floating_point() or not isinstance(first, torch.Tensor) or x.dim() < 2 or not x.numel():
        return None
    if packet in BATCH_NORMS:
        training = next((a for a in args[1:] if isinstance(a, bool)), kwargs.get("training", True))
        if not training:
            return None
        k = _kappa(x, [d for d in range(x.dim()) if d != 1])
    elif packet is aten.native_layer_norm:
        nd = len(args[1])
        k = _kappa(x, list(range(x.dim() - nd, x.dim())))
    elif packet is aten.native_group_norm:  # (input, weight, bias, N, C, HxW, group, eps)
        n, c, g = int(args[3]), int(args[4]), int(args[6])
        k = _kappa(x.reshape(n, g, -1), [2]).repeat_interleave(c // g, dim=1)
        k = k.reshape((n, c) + (1,) * (x.dim() - 2))
    elif packet in VARIANCES:
        dim = args[1] if len(args) > 1 and not isinstance(args[1], (bool, float, int)) else kwargs.get("dim")
        dims = list(range(x.dim())) if dim is None or (isinstance(dim, (list, tuple)) and not dim) else (
            [int(d) % x.dim() for d in dim] if isinstance(dim, (list, tuple)) else [int(dim) % x.dim()])
        k = _kappa(x, dims)
        if k.numel() != first.numel():
            return None
        k = k.reshape(first.shape)
    else:
        return None
    return (float(length) * k).to(torch.float32).cpu()


def fits_shape(spread: torch.Tensor, shape: tuple) -> bool:
    """Whether a record broadcasts to ``shape`` without growing it."""
    shape = tuple(shape)
    if spread.dim() > len(shape):
        return False
    try:
        return tuple(torch.broadcast_shapes(tuple(spread.shape), shape)) == shape
    except RuntimeError:
        return False


def _fits(spread: torch.Tensor, t) -> bool:
    """Whether a record broadcasts to tensor ``t`` without growing it."""
    return isinstance(t, torch.Tensor) and fits_shape(spread, t.shape)


def _larger(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    """The elementwise larger of two per-element records of one tensor (both broadcastable to it)."""
    if a is None or b is None:
        return a if b is None else b
    return torch.maximum(a, b)


def _spread_through(spread: torch.Tensor | None, func, src, out) -> torch.Tensor | None:
    """A per-element record of ``src`` as it reaches ``out``: kept through a pointwise op (torch's own tag) or a
    copy where it still broadcasts to the output (the element it belongs to is the one it lands on), reshaped
    with the elements through a view or reshape, dropped elsewhere (a matmul, a pooling, a permutation: the
    budget's other floors judge what a contraction mixes)."""
    if spread is None or not isinstance(out, torch.Tensor) or not isinstance(src, torch.Tensor):
        return None
    packet = func._overloadpacket
    if packet in RESHAPES:
        if out.numel() != src.numel() or out.numel() > SPREAD_MAX or not _fits(spread, src):
            return None
        return spread.expand(src.shape).reshape(out.shape)
    pointwise = torch.Tag.pointwise in getattr(func, "tags", ()) or packet in SAME_ELEMENTS
    if pointwise and _fits(spread, out) and src.dim() <= out.dim() and _fits(src, out):
        return spread
    return None


NONE = Reduction()


class ReductionTracker(TorchDispatchMode):
    """Records, per tensor produced under it, the longest reductions on its way (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = WeakTensorKeyDictionary()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        try:
            k, same = _op_length(func, args, kwargs, out)
            own = Reduction(k, k if same and k > 1 else 0, _scan_of(func, args, kwargs))
            spread = variance_lengths(func, args, kwargs, out, k) if same and k > 1 else None
            srcs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            kept = _keeps_values(func, args, kwargs)
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    r = own if spread is None or not _fits(spread, t) else Reduction(k, own.same_sign, own.scan,
                                                                                      spread)
                    for src in srcs:
                        r = r.join(self.seen.get(src, NONE).through(func, src, t, kept))
                    if r != NONE:
                        self.seen[t] = r.join(self.seen.get(t, NONE))
        except Exception:  # noqa: BLE001 - a record is a budget's floor, never a reason for the reference to fail
            pass
        return out

    def reductions(self, outputs: list) -> list[Reduction]:
        """Per output, the longest reductions that produced it (``NONE`` for a non-tensor or where none did)."""
        return [self.seen.get(o, NONE) if isinstance(o, torch.Tensor) else NONE for o in outputs]


# the budget's floors from an output's reductions: a sequential fp32 sum of K zero-mean terms errs by
# <= 1.7 x EPS32 x sqrt(K) of the typical |value|, of K same-sign terms by 0.003..0.011 x EPS32 x K of the
# sum (K = 2^12..2^22, bench/results/accumulation_budget_cpu.md); both floors are tol_scale below K ~ 1.8e6 / 4.5e4
EPS32 = 2.0 ** -24
ACC_SQRT = 1.0  # the scale term's floor: ACC_SQRT x EPS32 x sqrt(K), K the longest reduction
ACC_LINEAR = 0.03  # the relative term's floor: ACC_LINEAR x EPS32 x K, K the longest same-sign reduction
# a one-pass variance's floor once a contraction mixed its elements (``folded_floor``): the largest share measured of
# a same-sign sum's error (0.011 at K = 4096, less beyond), not ACC_LINEAR's margin over it, which would let TF32
# products after the norm through (their error is a share of the output's size too)
ACC_FOLDED = 0.011
# a folded floor the plan saw below this (a quarter of the default relative floor, tol_scale 8e-5) is left to the
# plan's value: tracking every judged run costs ~3 ms an op (a ResNet's batch norms, then convolutions: a folded
# floor of 3e-6, and 0.33 s a run against 0.01 s untracked); above it each run records its own (its job's weights)
FOLDED_TRACKED = 2e-5


class RefStats(NamedTuple):
    """What the plan's draws say of one fp32 output: the reference's largest error against float64, the largest
    |value|, the longest reduction on its way and the longest whose terms share one sign (0: not recorded), and
    where a scan lies on it (``Reduction.scan``), whether a one-pass variance lies on its way (``variance``) and,
    for one judged run, its same-sign length per element (``spread``: ``variance_lengths``, or None). ``wide``: a float64 output of a reference that computes in
    float64 throughout (``NarrowFloats`` saw no narrower float on its way): judged against float64 rounding
    (verifier/judge/numerics.py ``float64_budget``)."""

    err: float
    scale: float
    reduction: int = 0
    same_sign: int = 0
    scan: int = SCAN_NONE
    wide: bool = False
    # the plan's: whether a one-pass variance lies on its way; the judged run's: its per-element same-sign length
    # (Reduction.spread; verifier/judge/outputs.py ``reference64_judged``)
    variance: bool = False
    spread: torch.Tensor | None = None
    folded: float = 0.0  # a one-pass variance's floor as a share of the output's scale (``Reduction.folded``)


WIDE = (torch.float64, torch.complex128)


class NarrowFloats(TorchDispatchMode):
    """Whether a forward run under it made any floating tensor narrower than float64 (``narrow``): a reference whose
    float64 outputs come through float32, half or bfloat16 somewhere carries that rounding, so they get the fixed
    tolerance, not float64's. Run over the task's own reference only, in the verifier's process."""

    def __init__(self) -> None:
        super().__init__()
        self.narrow = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not self.narrow:
            self.narrow = any(isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())
                              and t.dtype not in WIDE for t in tree_flatten(out)[0])
        return out


def accumulation_floors(reduction: int, same_sign: int, tol_scale: float) -> tuple[float, float]:
    """(the floor of the scale term, the floor of the relative term) for an output of a ``reduction``-term sum,
    of which ``same_sign`` terms share one sign; ``tol_scale`` for both where the reductions are short."""
    return (max(tol_scale, ACC_SQRT * EPS32 * math.sqrt(max(0, reduction))),
            max(tol_scale, ACC_LINEAR * EPS32 * max(0, same_sign)))
