"""Index outputs of a selection (topk, sort, argsort, argmax / argmin, max / min over a dimension, kthvalue, median,
mode) judged by what they select, not by which of several equal values they name.

Where the selected values tie (a quantised input, a ReLU's zeros, two near-equal scores) more than one index is a
right answer: torch.topk and an unstable sort document no order among ties, and an honest kernel that scans in
another order, or whose own rounding breaks a near tie the other way, names another element of equal value. Compared
index for index with the reference, its output was wrong (docs/ANTI_CHEAT.md class 77).

``SelectionTracker`` is a dispatch mode run over the task's own reference (never the candidate's code, in the
verifier's processes): each index tensor a selection op returns is recorded with the tensor it selects from, its
dimension and what the op promises (``Selection``), and passed on through copies and reshapes that keep its elements'
order (``.to(int32)``, ``view``, ``squeeze``, ``contiguous``). ``reference_outputs`` runs a reference under it and
marks its outputs; ``selection_of`` reads an output's mark; ``resolved`` is the one way a check (the judge's, the
harness's of a timed call: each a ``TieRule``) reads a candidate's output by the mark. ``tie_resolved`` hands back a candidate's index output
with every index that selects a value equal to the reference's pick (``close``: the judge's budget, the harness's
loose check) replaced by the reference's own index, so the comparison that follows sees only wrong picks:

- an index out of range, or one repeated in a row of a topk or a sort (k copies of the maximum's position) is never
  a tie;
- where the op documents its choice among exact ties (argmax / argmin and max / min over a dimension: the first
  occurrence; a stable sort: the input's order), an index whose value equals the reference's pick in fp32 and in
  float64 (a true tie) must be the reference's; a near tie (values that differ, within the budget) may go either way;
- a topk with ``sorted=False`` promises no order along its dimension (docs/ANTI_CHEAT.md class 110): both its outputs
  are marked ``Unordered``, and ``aligned`` puts a candidate's output in the reference's order before it is compared
  (values by value; indices by the values they select, then as a topk's among ties), so any order of the same
  selection is right and a wrong selection stays wrong.

A boolean output of a comparison (``x @ w > 0``, ``x >= threshold``) is read the same way (``Threshold``,
``threshold_resolved``): where ``a - b`` is within rounding of zero (the judge: the budget of ``a - b`` measured from
the fp32 reference's against float64's accepts 0), the other answer is as right; an exact tie keeps its answer.

Max pooling's ``return_indices`` (``max_pool1d/2d/3d_with_indices`` and adaptive max pooling, docs/ANTI_CHEAT.md class
111) is read the same way (``Pooled``, ``pooled_resolved``): an index that names, inside the same window, a value tied
with the reference's pick (within the budget of the picked values) is as right; one outside its window, out of range,
or on a smaller value stays wrong. PyTorch documents no choice among a window's ties.

An unsorted topk's values carry the mark through pointwise arithmetic of their own (``relu(v * 2 - 1)``), which permutes
with them; not through an operand laid out by position (``v + bias``).

Not covered: an index output that reaches the task's output through arithmetic (``indices + 1``, a gather of other
values by it) or a permutation (``.t()``) is compared as an integer output, exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakTensorKeyDictionary

aten = torch.ops.aten

# op -> (the position of its index output in what it returns, any index among exact ties right)
SELECTIONS = {
    aten.topk: (1, True), aten.sort: (1, True), aten.kthvalue: (1, True), aten.median: (1, True),
    aten.nanmedian: (1, True), aten.mode: (1, True), aten.max: (1, False), aten.min: (1, False),
    aten.argmax: (None, False), aten.argmin: (None, False),
}
# ops whose output holds their input's elements in the same row-major order (a reshape, a copy, a dtype change)
KEEPS_ORDER = (aten.view, aten._unsafe_view, aten.reshape, aten.squeeze, aten.unsqueeze, aten.flatten, aten.clone,
               aten.contiguous, aten.alias, aten.detach, aten._to_copy, aten.lift_fresh, aten.to)


@dataclass(frozen=True)
class Selection:
    """What one index output selects: ``src`` the values selected from, ``dim`` the dimension (None: the flattened
    input, argmax without a dimension), ``shape`` the index tensor as the op returned it (the output holds its elements
    in that order), ``keepdim`` whether it kept ``dim``, ``unique`` whether a row's indices are distinct (topk,
    sort), ``any_tie`` whether any index among exact ties is right (else the reference's documented choice)."""

    src: torch.Tensor
    dim: int | None
    shape: tuple
    keepdim: bool
    unique: bool
    any_tie: bool


def _bound(func, args, kwargs) -> dict:
    """The op's arguments by name, defaults filled in from its schema."""
    out = {}
    for i, a in enumerate(func._schema.arguments):
        if i < len(args) and not a.kwarg_only:
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
    return out


@dataclass(frozen=True)
class Unordered:
    """An output of a topk with ``sorted=False``: its elements along ``dim`` (of ``shape``, the layout the op returned)
    come in no promised order. ``sel``: the index output's selection (any index among ties, unique in a row); None
    for the values output."""

    dim: int
    shape: tuple
    sel: Selection | None


def _unordered_topk(func, args, kwargs, out) -> list | None:
    """Both outputs of a ``topk(..., sorted=False)`` marked ``Unordered`` (None for any other op)."""
    if func._overloadpacket is not aten.topk or not isinstance(out, (tuple, list)) or len(out) != 2 or \
            not args or not isinstance(args[0], torch.Tensor) or _bound(func, args, kwargs).get("sorted", True):
        return None
    values, idx = out
    if not isinstance(values, torch.Tensor) or not isinstance(idx, torch.Tensor) or idx.dtype != torch.int64:
        return None
    src = args[0].detach()
    dim = int(_bound(func, args, kwargs).get("dim", -1)) % max(src.dim(), 1)
    sel = Selection(src, dim, tuple(idx.shape), True, True, True)
    return [(values, Unordered(dim, tuple(values.shape), None)), (idx, Unordered(dim, tuple(idx.shape), sel))]


POOLS = {aten.max_pool1d_with_indices: 1, aten.max_pool2d_with_indices: 2, aten.max_pool3d_with_indices: 3}
# adaptive max pooling (adaptive_max_pool1d reaches the dispatcher as the 2d op over an unsqueezed input): output
# position i of a dimension of In -> Out takes the window [floor(i In / Out), ceil((i + 1) In / Out))
ADAPTIVE_POOLS = {aten.adaptive_max_pool2d: 2, aten.adaptive_max_pool3d: 3}


@dataclass(frozen=True)
class Pooled:
    """The index output of a max pooling (``return_indices``): each index names an element of its (batch, channel)
    plane of ``src`` (flattened over the ``n`` pooled dimensions) inside its output position's window (``kernel``,
    ``stride``, ``padding``, ``dilation``; ``adaptive``: an adaptive pooling's windows, from the sizes alone);
    ``shape`` the index tensor as the op returned it."""

    src: torch.Tensor
    n: int
    kernel: tuple
    stride: tuple
    padding: tuple
    dilation: tuple
    shape: tuple
    adaptive: bool = False


def _pooled(func, args, kwargs, out) -> tuple[torch.Tensor, Pooled] | None:
    adaptive = ADAPTIVE_POOLS.get(func._overloadpacket)
    n = POOLS.get(func._overloadpacket) or adaptive
    if n is None or not isinstance(out, (tuple, list)) or len(out) != 2 or not args or \
            not isinstance(args[0], torch.Tensor) or not isinstance(out[1], torch.Tensor):
        return None
    b = _bound(func, args, kwargs)

    def per_dim(v, default):
        v = default if v is None or (isinstance(v, (list, tuple)) and not len(v)) else v
        v = [int(x) for x in v] if isinstance(v, (list, tuple)) else [int(v)]
        return tuple(v * n if len(v) == 1 else v)

    if adaptive:
        return out[1], Pooled(args[0].detach(), n, (), (), (), (), tuple(out[1].shape), adaptive=True)
    kernel = per_dim(b.get("kernel_size"), 1)
    return out[1], Pooled(args[0].detach(), n, kernel, per_dim(b.get("stride"), kernel), per_dim(b.get("padding"), 0),
                          per_dim(b.get("dilation"), 1), tuple(out[1].shape))


def pooled_picks(src: torch.Tensor, mark: Pooled, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the values of ``src`` an index output names, flattened per plane; which indices are inside the plane)."""
    plane = 1
    for d in src.shape[-mark.n:]:
        plane *= int(d)
    flat = src.reshape(*src.shape[:-mark.n], plane)
    i = idx.to(src.device).reshape(mark.shape).to(torch.int64)
    i = i.reshape(*i.shape[:-mark.n], -1)
    inside = (i >= 0) & (i < plane)
    return flat.gather(-1, torch.where(inside, i, torch.zeros_like(i))), inside


def _in_window(mark: Pooled, idx: torch.Tensor) -> torch.Tensor:
    """Whether each flattened index (in ``pooled_picks``' layout) lies in its own output position's window."""
    ins, outs = mark.src.shape[-mark.n:], mark.shape[-mark.n:]
    pos = torch.arange(idx.shape[-1], device=idx.device)
    ok = torch.ones_like(idx, dtype=torch.bool)
    rest = idx.clone()
    for d in reversed(range(mark.n)):
        coord, rest = rest % int(ins[d]), rest // int(ins[d])
        out_at = pos % int(outs[d])
        pos = pos // int(outs[d])
        if mark.adaptive:
            size, cut = int(ins[d]), int(outs[d])
            ok &= (coord >= out_at * size // cut) & (coord < -(-(out_at + 1) * size // cut))
            continue
        rel = coord - (out_at * mark.stride[d] - mark.padding[d])
        ok &= (rel >= 0) & (rel % mark.dilation[d] == 0) & (rel // mark.dilation[d] < mark.kernel[d])
    return ok


def pooled_resolved(o: torch.Tensor, r: torch.Tensor, mark: Pooled,
                    close: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> tuple[torch.Tensor, int]:
    """(the candidate's pooling index output ``o`` with each index that names, inside its window, a value ``close``
    to the reference's pick ``r`` replaced by ``r``'s, how many). Anything else stays for the comparison to find."""
    if o.shape != r.shape or o.dtype != r.dtype or o.is_floating_point() or not o.numel():
        return o, 0
    try:
        mine, inside = pooled_picks(mark.src, mark, o)
        theirs, _ = pooled_picks(mark.src, mark, r)
        oi = o.to(mark.src.device).reshape(mark.shape).to(torch.int64)
        oi = oi.reshape(*oi.shape[:-mark.n], -1)
        ri = r.to(mark.src.device).reshape(oi.shape).to(torch.int64)
        ok = inside & (oi != ri) & close(mine, theirs) & _in_window(mark, torch.where(inside, oi, ri))
    except RuntimeError:
        return o, 0
    n = int(ok.sum())
    if not n:
        return o, 0
    return torch.where(ok, ri, oi).reshape(o.shape).to(o.dtype).to(o.device), n


def _order(key: torch.Tensor, then: torch.Tensor, dim: int) -> torch.Tensor:
    """The permutation along ``dim`` that puts ``key`` in descending order, equal keys by ``then`` ascending."""
    first = then.argsort(dim=dim, stable=True)
    return first.gather(dim, key.gather(dim, first).argsort(dim=dim, descending=True, stable=True))


def aligned(o: torch.Tensor, r: torch.Tensor, mark: Unordered) -> torch.Tensor:
    """The output ``o`` of a topk with ``sorted=False`` put in the order of the reference's ``r`` along the mark's
    dimension: the values output by value, the index output by the values its indices select (an index out of range
    last, for the comparison to find). The same selection in any order then compares equal, element for element; ``o``
    unchanged where the shapes do not fit."""
    if o.shape != r.shape or o.dtype != r.dtype or not o.numel():
        return o
    try:
        oo, rr = o.to(r.device).reshape(mark.shape), r.reshape(mark.shape)
        if mark.sel is None:
            ko, kr = oo, rr
        else:
            src = mark.sel.src.to(r.device)
            inside = (oo >= 0) & (oo < src.shape[mark.dim])
            mine = picked(src, mark.sel, torch.where(inside, oo, torch.zeros_like(oo)))
            if mine.is_floating_point():
                ko = torch.where(inside, mine, torch.full_like(mine, float("-inf")))
            else:
                ko = torch.where(inside, mine, torch.full_like(mine, torch.iinfo(mine.dtype).min))
            kr = picked(src, mark.sel, rr)
        if ko.is_floating_point():  # NaN last, as an out-of-range index
            ko, kr = ko.nan_to_num(float("-inf")), kr.nan_to_num(float("-inf"))
        out = torch.empty_like(oo).scatter_(mark.dim, _order(kr, rr, mark.dim), oo.gather(mark.dim,
                                                                                          _order(ko, oo, mark.dim)))
        return out.reshape(o.shape).to(o.device)
    except RuntimeError:
        return o


def _selection(func, args, kwargs, out) -> tuple[torch.Tensor, Selection] | None:
    packet = func._overloadpacket
    if packet not in SELECTIONS or not args or not isinstance(args[0], torch.Tensor):
        return None
    at, any_tie = SELECTIONS[packet]
    idx = out[at] if at is not None and isinstance(out, (tuple, list)) else out
    if not isinstance(idx, torch.Tensor) or idx.dtype != torch.int64:
        return None  # max(x) without a dimension: a value, no index
    b = _bound(func, args, kwargs)
    src = args[0].detach()
    dim = b.get("dim")
    if packet is aten.topk and not b.get("sorted", True):
        return None  # no order promised at all: not read here (see the module docstring)
    if packet is aten.sort:
        any_tie = not b.get("stable", False)
        keepdim = True
    elif packet is aten.topk:
        keepdim = True
    else:
        keepdim = bool(b.get("keepdim", False))
    if dim is not None:
        dim = int(dim) % max(src.dim(), 1)
    elif packet not in (aten.argmax, aten.argmin):
        return None
    return idx, Selection(src, dim, tuple(idx.shape), keepdim, packet in (aten.topk, aten.sort), any_tie)


COMPARISONS = (aten.gt, aten.ge, aten.lt, aten.le)


@dataclass(frozen=True)
class Threshold:
    """What a boolean output of a comparison (``a > b``, ``>=``, ``<``, ``<=``) compares: ``a`` and ``b`` (a tensor or
    a number), floating. Where ``a - b`` is within rounding of zero, either answer is one an honest kernel's own
    rounding gives (docs/ANTI_CHEAT.md class 108)."""

    a: torch.Tensor
    b: object
    shape: tuple

    def difference(self) -> torch.Tensor:
        """``a - b`` in the comparison's broadcast shape, in the operands' own dtype."""
        b = self.b.to(self.a.device) if isinstance(self.b, torch.Tensor) else self.b
        return torch.broadcast_to(self.a - b, self.shape)


def _threshold(func, args, out) -> tuple[torch.Tensor, Threshold] | None:
    if func._overloadpacket not in COMPARISONS or len(args) < 2 or not isinstance(out, torch.Tensor) \
            or out.dtype != torch.bool or not isinstance(args[0], torch.Tensor) or not args[0].is_floating_point():
        return None
    b = args[1]
    if isinstance(b, torch.Tensor):
        if not b.is_floating_point():
            return None
        b = b.detach()
    elif not isinstance(b, (int, float)):
        return None
    return out, Threshold(args[0].detach(), b, tuple(out.shape))


def _elementwise_of_unordered(seen, func, args, kwargs, out) -> Unordered | None:
    """The mark of an unsorted topk's values output (``Unordered``, no ``sel``) carried through a pointwise op whose
    every tensor operand of more than one element carries that same mark (``relu(v * 2 - 1)``, ``v * v.sigmoid()``;
    scalars and 0-d tensors beside it): such an op permutes with its input, so its output is in no promised order
    either. An operand laid out by position (a bias of the row's width) does not carry it: the output is then not a
    permutation of the reference's. Index outputs are not carried (``i + 1`` no longer names elements)."""
    if torch.Tag.pointwise not in getattr(func, "tags", ()) or not isinstance(out, torch.Tensor):
        return None
    operands = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.numel() > 1]
    if not operands or any(a not in seen for a in operands):
        return None
    mark = seen[operands[0]]
    if not isinstance(mark, Unordered) or mark.sel is not None or any(seen[a] is not mark for a in operands):
        return None
    if any(a.shape != out.shape for a in operands):
        return None
    return mark


class SelectionTracker(TorchDispatchMode):
    """Records the index outputs of selection ops, and the boolean outputs of comparisons, run under it (see the
    module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = WeakTensorKeyDictionary()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        try:
            both = _unordered_topk(func, args, kwargs, out)
            found = None if both else (_selection(func, args, kwargs, out) or _pooled(func, args, kwargs, out)
                                       or _threshold(func, args, out))
            for t, mark in both or ([found] if found is not None else []):
                self.seen[t] = mark
            if not both and found is None and func._overloadpacket in KEEPS_ORDER and args and isinstance(args[0], torch.Tensor) \
                    and isinstance(out, torch.Tensor) and args[0] in self.seen and out.numel() == args[0].numel():
                self.seen[out] = self.seen[args[0]]
            elif not both and found is None:
                mark = _elementwise_of_unordered(self.seen, func, args, kwargs, out)
                if mark is not None:
                    self.seen[out] = mark
        except Exception:  # noqa: BLE001 - a record widens a comparison; it is never a reason for the reference to fail
            pass
        return out


_MARKS = WeakTensorKeyDictionary()  # a reference's output -> its Selection (``reference_outputs``)


def reference_outputs(model, inputs: list, track: bool = True) -> list:
    """The reference's outputs on ``inputs`` (flattened, detached), each index output of a selection marked with what
    it selects (``selection_of``); ``track=False``: the plain run (a task without such outputs)."""
    from verifier.common.inputs import as_list

    if not track:
        return [r.detach() if isinstance(r, torch.Tensor) else r for r in as_list(model(*inputs))]
    with SelectionTracker() as tracker:
        outs = as_list(model(*inputs))
    marked = []
    for r in outs:
        sel = tracker.seen.get(r) if isinstance(r, torch.Tensor) else None
        r = r.detach() if isinstance(r, torch.Tensor) else r
        if sel is not None:
            _MARKS[r] = sel
        marked.append(r)
    return marked


def selection_of(t) -> Selection | Threshold | Unordered | Pooled | None:
    """What the reference's output ``t`` selects, where ``reference_outputs`` marked it, else None."""
    return _MARKS.get(t) if isinstance(t, torch.Tensor) else None


def has_selection(outputs: list) -> bool:
    return any(selection_of(o) is not None for o in outputs)


def as_index(t: torch.Tensor, sel: Selection) -> torch.Tensor:
    """An output in the index tensor's own layout, with the selected dimension kept (size 1 for an argmax)."""
    t = t.reshape(sel.shape).to(torch.int64)
    if sel.dim is None:
        return t.reshape(1)
    return t if sel.keepdim else t.unsqueeze(sel.dim)


def picked(src: torch.Tensor, sel: Selection, idx: torch.Tensor) -> torch.Tensor:
    """The values of ``src`` that ``idx`` (in ``as_index``'s layout, in range) names."""
    if sel.dim is None:
        return src.reshape(-1).gather(0, idx)
    return src.gather(sel.dim, idx)


def tie_resolved(o: torch.Tensor, r: torch.Tensor, sel: Selection,
                 close: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                 src64: torch.Tensor | None = None) -> tuple[torch.Tensor, int, int]:
    """(the candidate's index output ``o`` with each index that selects a value tied with the reference's pick ``r``
    replaced by ``r``'s, how many were replaced, how many name a true tie where the op documents its choice and are
    left as they were). ``close(values at o, values at r)`` is the per-element rule for a
    tie (the budget of the selected values); ``src64``: the float64 run's source, which tells a true tie (equal in
    fp32 and in float64) from one made by fp32 rounding, where the op documents its choice among true ties.
    Anything that is not a valid choice among ties stays as it was, for the comparison to find."""
    if o.shape != r.shape or o.dtype != r.dtype or o.is_floating_point() or not o.numel():
        return o, 0, 0
    # all of it on the reference's device: the candidate's output may be a host copy of an answer the reference gave
    # on the GPU (a model-written argmax judged so was the verifier's error, gather across two devices, at 54a3136)
    src = sel.src.to(r.device)
    try:
        oi, ri = as_index(o.to(r.device), sel), as_index(r, sel)
    except RuntimeError:
        return o, 0, 0
    size = src.numel() if sel.dim is None else (src.shape[sel.dim] if src.dim() else 1)
    inside = (oi >= 0) & (oi < size)
    oc = torch.where(inside, oi, torch.zeros_like(oi))
    mine, theirs = picked(src, sel, oc), picked(src, sel, ri)
    ok = inside & (oi != ri) & close(mine, theirs)
    documented = 0
    if not sel.any_tie:  # a true tie has the documented answer (the first occurrence, the input's order)
        exact = mine == theirs
        if src64 is not None and src64.shape == src.shape:
            s64 = src64.to(r.device)
            exact &= picked(s64, sel, oc) == picked(s64, sel, ri)
        documented = int((ok & exact).sum())
        ok &= ~exact
    if sel.unique and sel.dim is not None:  # a row that names one element twice selects nothing valid
        srt = oi.sort(dim=sel.dim).values
        dup = (srt.narrow(sel.dim, 1, max(srt.shape[sel.dim] - 1, 0)) ==
               srt.narrow(sel.dim, 0, max(srt.shape[sel.dim] - 1, 0))).any(dim=sel.dim, keepdim=True)
        ok &= ~dup
    n = int(ok.sum())
    if not n:
        return o, 0, documented
    fixed = torch.where(ok, ri, oi)
    if sel.dim is not None and not sel.keepdim:
        fixed = fixed.squeeze(sel.dim)
    return fixed.reshape(o.shape).to(o.dtype).to(o.device), n, documented


def threshold_resolved(o: torch.Tensor, r: torch.Tensor, rec: Threshold,
                       near_zero: Callable[[torch.Tensor], torch.Tensor]) -> tuple[torch.Tensor, int]:
    """(the candidate's boolean output ``o`` with each answer that differs from the reference's ``r`` where
    ``near_zero(a - b)`` says the difference is within rounding of zero taken as the reference's, how many). An exact
    tie (``a == b``) has its answer (``>`` false, ``>=`` true) and is left as it was."""
    if o.shape != r.shape or o.dtype != torch.bool or r.dtype != torch.bool or not o.numel():
        return o, 0
    try:
        d = rec.difference().reshape(r.shape)
    except RuntimeError:
        return o, 0
    oo = o.to(r.device)
    ok = (oo != r) & near_zero(d).reshape(r.shape).to(r.device) & (d != 0)
    n = int(ok.sum())
    return (torch.where(ok, r, oo).to(o.device), n) if n else (o, 0)


def loose_close(rtol: float) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A tie rule for the harness's check of a timed call (about ``rtol`` of the values' scale, exact ties too)."""
    def close(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if not a.is_floating_point():
            return a == b
        scale = float(b.abs().nan_to_num(0.0, posinf=0.0, neginf=0.0).max()) if b.numel() else 0.0
        return torch.isclose(a, b, rtol=rtol, atol=rtol * 1e-1 * scale + 1e-6, equal_nan=True)
    return close


Close = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class TieRule(Protocol):
    """How near a candidate's pick must be to the reference's to be as right, per kind of mark: the judge's budget
    (measured from the fp32 reference's picks against float64's, verifier/judge/outputs.py) or the harness's loose
    check of a timed call (``Loose``). ``r`` is the reference's output carrying ``mark``."""

    def selection(self, mark: Selection, r: torch.Tensor) -> tuple[Close, torch.Tensor | None]:
        """(``tie_resolved``'s rule, the float64 run's source or None)."""

    def threshold(self, mark: Threshold, r: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        """``threshold_resolved``'s rule: whether a difference is within rounding of zero."""

    def pooled(self, mark: Pooled, r: torch.Tensor) -> Close:
        """``pooled_resolved``'s rule."""


class Loose:
    """The harness's ``TieRule``: a pick within about ``rtol`` of the values' scale is a tie (``loose_close``)."""

    def __init__(self, rtol: float):
        self.close = loose_close(rtol)

    def selection(self, mark: Selection, r: torch.Tensor) -> tuple[Close, None]:
        return self.close, None

    def threshold(self, mark: Threshold, r: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda d: self.close(d, torch.zeros_like(d)) | self.close(torch.zeros_like(d), d)

    def pooled(self, mark: Pooled, r: torch.Tensor) -> Close:
        return self.close


def resolved(o, r: torch.Tensor, rule: TieRule) -> tuple[torch.Tensor, int, int]:
    """(the candidate's output ``o`` read by the mark of the reference's ``r``, how many of its answers were taken as
    the reference's, how many name a true tie where the op documents its choice and were left): a topk's output in no
    promised order put in the reference's first (``aligned``, class 110), then an index output's valid choices among
    tied values (``tie_resolved``, class 77), a comparison's answers near its threshold (``threshold_resolved``, class
    108), a max pooling's ties inside a window (``pooled_resolved``, class 111) taken as the reference's, by ``rule``.
    ``o`` unchanged where ``r`` carries no mark or the two do not fit."""
    mark = selection_of(r)
    if isinstance(mark, Unordered):
        o = aligned(o, r, mark)
        mark = mark.sel
    if mark is None or not isinstance(o, torch.Tensor) or o.is_floating_point() or o.shape != r.shape \
            or o.dtype != r.dtype:
        return o, 0, 0
    if isinstance(mark, Threshold):
        return (*threshold_resolved(o, r, mark, rule.threshold(mark, r)), 0)
    if isinstance(mark, Pooled):
        return (*pooled_resolved(o, r, mark, rule.pooled(mark, r)), 0)
    close, src64 = rule.selection(mark, r)
    return tie_resolved(o, r, mark, close, src64)
