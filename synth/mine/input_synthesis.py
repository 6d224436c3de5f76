"""Deduce the forward inputs of a constructed module, scale them, then apply the filters.

Runs inside the sandbox's forked children (synth/mine/input_sandbox.py), never in the parent, on a model
that synth/mine/init_args.py built. :func:`deduce_inputs` finds forward inputs: every required parameter,
positional or keyword-only (passed by keyword); the first from the constructor arguments
(``image_size``, ``channels``) or the module's first layer, the others from their names (a ``mask`` is
boolean over the first input's leading dimensions, a ``time`` step has one value per sample, ``ids``
are integers) or shaped like the first; then error messages ("mat1 and mat2 shapes cannot be
multiplied", "expected input[...] to have 16 channels", the failing line naming the input at fault)
and fallbacks (common image sides, every rank). :func:`scale_inputs` doubles free dimensions toward
``target_numel`` within a per-forward time cap; synth/mine/input_filters.py then checks the filters at the
final shapes.

Deduction is heuristic: a module that needs inputs it cannot guess is counted as not deduced, and a
module that detects it is being probed is not caught by the filters.

This file uses only the standard library at import time (torch is imported inside the sandbox), so
the parent can import FILTERS from here.
"""

from __future__ import annotations

import inspect
import re

from synth.mine.init_args import DeductionFailed, failing_line, is_memory_error, params_named_in, required_params

from synth.mine.input_filters import FILTERS, flatten_outputs, run_forward  # noqa: F401 - callers import them from here
from synth.mine.own_clock import own_clock  # the deadline's clock (see input_sandbox.py)


# ============================================================================ forward inputs


class InputGuess:
    """One forward input: a float tensor, integer ids in [0, hi), or a boolean mask (mostly True).
    ``name`` is the forward parameter it feeds; ``keyword`` says it is passed by keyword (a keyword-only
    parameter of forward)."""

    def __init__(self, kind: str, shape: list[int], hi: int = 2, name: str = "x", keyword: bool = False):
        self.kind, self.shape, self.hi, self.name, self.keyword = kind, list(shape), hi, name, keyword

    def key(self):
        return (self.kind, tuple(self.shape), self.hi)

    def copy(self, **change) -> "InputGuess":
        g = InputGuess(self.kind, self.shape, self.hi, self.name, self.keyword)
        for k, v in change.items():
            setattr(g, k, list(v) if k == "shape" else v)
        return g

    def make(self, gen):
        import torch

        if self.kind == "int":
            return torch.randint(0, max(self.hi, 1), self.shape, generator=gen)
        if self.kind == "bool":
            return torch.rand(self.shape, generator=gen) < MASK_KEEP
        return torch.randn(self.shape, generator=gen)

    def as_dict(self, name: str | None = None) -> dict:
        dtype = {"int": "int64", "bool": "bool"}.get(self.kind, "float32")
        return {"name": name or self.name, "kind": self.kind, "shape": self.shape, "hi": self.hi, "dtype": dtype,
                "keyword": self.keyword}


MASK_KEEP = 0.9  # share of True in a synthesised mask: a row masked out entirely would be all -inf
_MASK_RE = r"mask"
_TIME_RE = r"^(t|time|times|timestep|timesteps|noise_level|noise_levels|sigma|sigmas|log_snr|step)$"
_IDS_RE = r"(^|_)(ids|tokens|token_ids|labels|targets|indices)$"


def guess_for_param(name: str, first: InputGuess, model) -> InputGuess:
    """The guess for a forward parameter after the first, from its name: a mask over the first input's
    leading dimensions, a per-sample time step, token ids, else a tensor like the first input."""
    low = name.lower()
    lead = first.shape[:2]
    if re.search(_MASK_RE, low):
        return InputGuess("bool", lead, name=name)
    if re.search(_TIME_RE, low):
        return InputGuess("float", first.shape[:1], name=name)
    if re.search(_IDS_RE, low):
        return InputGuess("int", lead, _num_embeddings(model), name=name)
    return first.copy(name=name)


def _num_embeddings(model) -> int:
    return min([e.num_embeddings for e in model.modules() if hasattr(e, "num_embeddings")] or [2])


_SIDE_RE = r"^(image_size|img_size|image_res|input_resolution|input_size|resolution|img_res|input_shape)$"
_LENGTH_RE = r"^(seq_len|seq_length|sequence_length|num_frames_len|series_len)$"
_CHANNELS_RE = r"^(channels|in_channels|in_chans|num_channels|input_channels|image_channels|in_ch|c_in)$"
_FRAMES_RE = r"^(frames|num_frames|image_frames)$"


def init_hint(init_values: dict) -> InputGuess | None:
    """An image (or video) guess from constructor arguments that say what the input is: ``image_size``
    and ``channels`` (3 when absent), ``frames`` for a video; None when they say nothing. A vision
    transformer's first layer (a patch rearrange, then LayerNorm over patch features) does not."""
    def find(pattern):
        return next((v for k, v in init_values.items() if re.search(pattern, k.lower())), None)

    side = find(_SIDE_RE)
    c = find(_CHANNELS_RE)
    length = find(_LENGTH_RE)
    if isinstance(side, (tuple, list)) and side and all(isinstance(x, int) for x in side):
        hw = list(side)
    elif isinstance(side, int) and not isinstance(side, bool) and side > 1:
        hw = [side, side]
    elif isinstance(length, int) and isinstance(c, int) and not isinstance(c, bool) and c > 0:
        return InputGuess("float", [2, c, length])  # a 1-D signal: ViT-1D's series
    else:
        return None
    c = c if isinstance(c, int) and not isinstance(c, bool) and c > 0 else 3
    frames = find(_FRAMES_RE)
    if isinstance(frames, int) and not isinstance(frames, bool) and frames > 0:
        return InputGuess("float", [2, c, frames, *hw])
    return InputGuess("float", [2, c, *hw])


def first_layer_hint(model, base: int) -> InputGuess:
    """An input guess from the first layer the module registers (or from its parameters)."""
    import torch.nn as nn

    for m in model.modules():
        if isinstance(m, (nn.Conv1d, nn.ConvTranspose1d)):
            return InputGuess("float", [2, m.in_channels, 32])
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            return InputGuess("float", [2, m.in_channels, 16, 16])
        if isinstance(m, (nn.Conv3d, nn.ConvTranspose3d)):
            return InputGuess("float", [2, m.in_channels, 8, 8, 8])
        if isinstance(m, nn.Embedding):
            return InputGuess("int", [2, 16], m.num_embeddings)
        if isinstance(m, nn.Linear):
            return InputGuess("float", [2, 16, m.in_features])
        if isinstance(m, nn.LayerNorm):
            return InputGuess("float", [2, 16, *m.normalized_shape])
        if isinstance(m, (nn.BatchNorm2d, nn.InstanceNorm2d)):
            return InputGuess("float", [2, m.num_features, 16, 16])
        if isinstance(m, (nn.BatchNorm1d, nn.InstanceNorm1d)):
            return InputGuess("float", [2, m.num_features, 32])
        if isinstance(m, nn.GroupNorm):
            return InputGuess("float", [2, m.num_channels, 16, 16])
        if isinstance(m, nn.RNNBase):
            return InputGuess("float", [2, 16, m.input_size] if m.batch_first else [16, 2, m.input_size])
        if isinstance(m, nn.MultiheadAttention):
            return InputGuess("float", [2, 16, m.embed_dim] if m.batch_first else [16, 2, m.embed_dim])
    for p in list(model.parameters()) + list(model.buffers()):
        if p.dim() == 1 and p.numel() > 1:
            return InputGuess("float", [2, 16, p.shape[0]])
        big = [d for d, n in enumerate(p.shape) if n > 1]
        if p.dim() >= 2 and len(big) == 1:  # a broadcast parameter: (1, C, 1, 1) scales channels of an image
            c, rank = p.shape[big[0]], p.dim() + (1 if p.shape[0] > 1 else 0)
            return InputGuess("float", [2, c] + [16] * (rank - 2) if big[0] < p.dim() - 1 else [2, 16, c])
    return InputGuess("float", [2, 16, base])


def _dims_of(shape_text: str) -> list[int]:
    return [int(x) for x in re.findall(r"-?\d+", shape_text)]


def adjust_inputs(guesses: list[InputGuess], msg: str, model, line: str = "") -> bool:
    """Change the guesses in place from an error message (and the mined program's source ``line`` where
    it was raised, which may name the input at fault); False when the message gives no hint."""
    named = params_named_in(line, [g.name for g in guesses]) if line else []
    # the guess the failing line names comes first, so a fix lands on the input at fault
    order = sorted(guesses, key=lambda g: g.name not in named)

    def set_last(value: int, old: int | None = None) -> bool:
        for g in order:
            if g.kind == "float" and len(g.shape) < 4 and (old is None or g.shape[-1] == old):
                g.shape[-1] = value
                return True
        return False

    def set_rank(rank: int) -> bool:  # the input at fault, and the inputs shaped like it
        at_fault = next((g for g in order if g.kind == "float" and len(g.shape) != rank), None)
        if at_fault is None:
            return False
        old = list(at_fault.shape)
        for g in guesses:
            if g.kind == "float" and g.shape == old:
                g.shape = _shape_of_rank(rank, old[1] if len(old) > 3 else old[-1])
        return True

    m = re.search(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", msg)
    if m:
        return set_last(int(m.group(3)), int(m.group(2))) or set_last(int(m.group(3)))
    m = re.search(r"expected input\[([^\]]*)\] to have (\d+) channels", msg)
    if m:
        seen = _dims_of(m.group(1))  # an unbatched input shows up with a leading 1 added
        for g in order:
            if g.kind == "float" and len(g.shape) > 1:
                if len(seen) != len(g.shape) and len(seen) > 2:
                    g.shape = [2, int(m.group(2))] + seen[2:]
                else:
                    g.shape[1] = int(m.group(2))
                return True
    m = re.search(r"running_mean should contain \d+ elements not (\d+)", msg) or re.search(
        r"Expected (?:weight|bias) to be (?:a vector )?of size equal to the number of channels in input.*?(\d+)", msg)
    if m:
        for g in order:
            if g.kind == "float" and len(g.shape) > 1:
                g.shape[1] = int(m.group(1))
                return True
    m = re.search(r"normalized_shape=\[([^\]]*)\], expected input with shape \[\*, ([^\]]*)\]", msg)
    if m:
        tail = _dims_of(m.group(2))
        for g in order:
            if g.kind == "float":
                g.shape = (g.shape[: max(1, len(g.shape) - len(tail))] + tail)
                return True
    m = re.search(r"Expected (\d)D \(unbatched\) or (\d)D \(batched\) input", msg) or re.search(
        r"Expected (\d)D or (\d)D input", msg, re.I) or re.search(r"expected (\d)D or (\d)D input", msg)
    if m:
        return set_rank(max(int(m.group(1)), int(m.group(2))))
    m = re.search(r"[Ee]xpected (\d)D input \(got (\d)D input\)", msg) or re.search(r"Expected (\d)D .*input.*got", msg)
    if m:
        return set_rank(int(m.group(1)))
    m = re.search(r"(?:not enough|too many) values to unpack \(expected (\d+)", msg)
    if m:  # ``b, n, _, h = *x.shape, self.heads``: the shape gives all but the items after it
        extra = re.search(r"=\s*\*\s*[\w.]+\.shape\s*((?:,\s*[^,=]+)*)\s*$", line)
        k = len([x for x in extra.group(1).split(",") if x.strip()]) if extra else 0
        return set_rank(int(m.group(1)) - k)
    m = re.search(r"divisible by (?:the )?(?:[a-z_]+ ){0,3}?(\d+)", msg)
    if m and int(m.group(1)) > 1:  # "height 16 and width 16 must be divisible by window size 7"
        n = int(m.group(1))
        side = n * max(1, round(32 / n))
        for g in order:
            if g.kind == "float" and len(g.shape) >= 4 and any(d % n for d in g.shape[2:]):
                g.shape = g.shape[:2] + [side] * (len(g.shape) - 2)
                return True
    m = re.search(r"Dimension out of range \(expected to be in range of \[-(\d+), (\d+)\], but got (-?\d+)\)", msg)
    if m:
        need = abs(int(m.group(3))) + (1 if int(m.group(3)) >= 0 else 0)
        return set_rank(max(need, int(m.group(1)) + 1))
    m = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension (\d+)", msg)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        for g in order:
            if g.kind == "float":
                for d in range(len(g.shape) - 1, -1, -1):
                    if g.shape[d] in (a, b) and d > 0:
                        g.shape[d] = b if g.shape[d] == a else a
                        return True
    if re.search(r"scalar type[s]? (Long|Int)|Expected tensor for argument #1 'indices'|expected scalar type Long|"
                 r"tensors used as indices must be long|only integer tensors", msg):
        for g in order:
            if g.kind == "float":
                g.kind, g.shape = "int", g.shape[:2] if len(g.shape) > 2 else g.shape
                g.hi = _num_embeddings(model)
                return True
    m = re.search(r"assert\s+(\w+)\s*(==|<=)\s*self\.(\w+)", line)
    if m:  # `b, n = x.shape; assert n == self.max_seq_len`: the sequence is as long as the model says
        want = getattr(model, m.group(3), None)
        if isinstance(want, int) and not isinstance(want, bool) and want > 0:
            for g in order:
                if len(g.shape) >= 2 and (g.shape[1] != want if m.group(2) == "==" else g.shape[1] > want):
                    g.shape[1] = want
                    return True
    m = re.search(r"max(?:imum)? sequence length (?:of |is )?(\d+)", msg)
    if m:  # "a sequence length of 128 but your absolute positional embedding has a max sequence length of 32"
        for g in order:
            if len(g.shape) >= 2 and g.shape[1] > int(m.group(1)):
                g.shape[1] = int(m.group(1))
                return True
    if "index out of range in self" in msg:
        for g in order:
            if g.kind == "int" and g.hi > 2:
                g.hi = 2
                return True
        for g in order:  # a float input that the module turns into embedding indices
            if g.kind == "float":
                g.kind, g.shape, g.hi = "int", g.shape[:2] if len(g.shape) > 2 else g.shape, _num_embeddings(model)
                return True
    return False


def _shape_of_rank(rank: int, c: int) -> list[int]:
    """Feature size c last for ranks up to 3 ([N, L, C]), second for images and volumes ([N, C, H, W])."""
    if rank >= 4:
        return [2, c] + [16] * (rank - 2)
    return {1: [c], 2: [2, c], 3: [2, 16, c]}.get(rank, [c])


IMAGE_SIDES = (32, 28, 64, 224, 16)  # CIFAR, MNIST, then larger and smaller images


def _plans(first: InputGuess, rest: list[InputGuess], dims: list[int]) -> list[list[InputGuess]]:
    """Fallback guesses once the first guess and its error-driven fixes fail: for an image input, the
    usual image sides (a classifier head fixes them: LeNet wants 32 x 32, an MNIST net 28 x 28); then
    every rank with each candidate feature size. Inputs that are not float (ids, masks) keep their guess."""
    def with_first(g: InputGuess) -> list[InputGuess]:  # inputs shaped like the first one follow it
        return [g] + [x.copy(shape=g.shape) if x.kind == "float" and x.shape == first.shape else x.copy() for x in rest]

    plans = []
    if first.kind == "float" and len(first.shape) >= 4:
        for side in IMAGE_SIDES:
            plans.append(with_first(first.copy(shape=first.shape[:2] + [side] * (len(first.shape) - 2))))
    for rank in (3, 2, 4, 1, 5):
        for d in dims:
            plans.append(with_first(first.copy(kind="float", shape=_shape_of_rank(rank, d))))
    return plans


def forward_signature(model):
    """The signature of the forward that does the work: past pass-through overrides such as the
    ``forward(self, *args, **kwargs)`` synth/mine/extract.py gives a class that inherits its forward."""
    for cls in type(model).__mro__:
        f = cls.__dict__.get("forward")
        if f is None:
            continue
        sig = inspect.signature(f)
        kinds = [p.kind for p in list(sig.parameters.values())[1:]]
        if kinds != [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]:
            return sig.replace(parameters=list(sig.parameters.values())[1:])
    return inspect.signature(model.forward)


def forward_params(model) -> list[tuple[str, bool]]:
    """(name, keyword-only) of the forward parameters to feed: every required one, positional or
    keyword-only; none required: the first optional positional one (``forward(self, input_ids=None)``)."""
    sig = forward_signature(model)
    req, kwonly = required_params(sig)
    names = [(p.name, False) for p in req] + [(p.name, True) for p in kwonly]
    if not names:
        optional = [p.name for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        names = [(n, False) for n in optional[:1]] or (
            [("x", False)] if any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values()) else [])
    return names




def _optional_inputs_named(model, msg: str, guesses: list[InputGuess]) -> list[str]:
    """Optional forward parameters (default None) that an error message names and that are not fed yet."""
    if not guesses:
        return []
    fed = {g.name for g in guesses}
    return [p.name for p in forward_signature(model).parameters.values()
            if p.default is None and p.name not in fed and p.kind != p.POSITIONAL_ONLY
            and len(p.name) > 2 and re.search(rf"\b{re.escape(p.name)}\b", msg)]


def deduce_inputs(model, base: int, init_ints: list[int], deadline: float, max_attempts: int = 40,
                  init_values: dict | None = None):
    """(input names, guesses, output) of the first forward call that runs; DeductionFailed otherwise
    (its ``line``: where the last attempt failed in the mined program). ``init_values``: the constructor
    arguments by name (``image_size`` and ``channels`` say what an image input looks like). ``deadline`` is
    read on synth.mine.own_clock's clock, which a busy machine does not advance."""
    params = forward_params(model)
    hint = init_hint(init_values or {}) or first_layer_hint(model, base)
    if not params:
        guesses = []
    else:
        first = hint.copy(name=params[0][0], keyword=params[0][1])
        guesses = [first] + [guess_for_param(n, first, model).copy(keyword=kw) for n, kw in params[1:]]
    plans = _plans(guesses[0], guesses[1:], list(dict.fromkeys([hint.shape[-1], *init_ints, base]))) if guesses else []
    seen, last, line = set(), "", ""
    expanded = {tuple(guesses[0].shape[:2])} if guesses and len(guesses[0].shape) >= 4 else set()
    for _ in range(max_attempts):
        if own_clock() > deadline:
            break
        seen.add(tuple(g.key() for g in guesses))
        try:
            _, out = run_forward(model, guesses, 0)
            return [g.name for g in guesses], guesses, out
        except Exception as e:  # noqa: BLE001
            if is_memory_error(e):
                raise DeductionFailed("forward", "memory", str(e)[:300])
            last, line = f"{type(e).__name__}: {str(e)[:300]}", failing_line(e)
            extra = _optional_inputs_named(model, str(e), guesses)
            if extra:  # "context must be passed in if cross_attend is set": feed it, by keyword
                guesses = guesses + [guess_for_param(n, guesses[0], model).copy(keyword=True) for n in extra]
                plans = [p + [guess_for_param(n, p[0], model).copy(keyword=True) for n in extra] for p in plans]
                continue
            trial = [g.copy() for g in guesses]
            if adjust_inputs(trial, str(e), model, line) and tuple(g.key() for g in trial) not in seen:
                guesses = trial
                continue
            g0 = guesses[0]
            if g0.kind == "float" and len(g0.shape) >= 4 and tuple(g0.shape[:2]) not in expanded:
                # an image guess reached by error-driven fixes: its usual sides come next
                expanded.add(tuple(g0.shape[:2]))
                plans = _plans(g0, guesses[1:], [])[: len(IMAGE_SIDES)] + plans
            while plans and tuple(g.key() for g in plans[0]) in seen:
                plans.pop(0)
            if not plans:
                break
            guesses = plans.pop(0)
    raise DeductionFailed("forward", "forward_failed", last or "no forward attempt succeeded", line)


# ============================================================================ scaling

DEFAULT_SCALE_WORK = 2e9  # MineSettings.scale_work: FLOPs + elements written by one forward


def _numel_metric(guesses, out) -> int:
    import torch

    n = [1]
    for g in guesses:
        p = 1
        for d in g.shape:
            p *= d
        n.append(p)
    n += [t.numel() for t in flatten_outputs(out) if isinstance(t, torch.Tensor)]
    return max(n)


def forward_work(model, guesses) -> tuple[object, float] | tuple[None, float]:
    """(output, work) of one forward at these shapes; work = FLOPs counted by torch's FlopCounterMode
    (matmul, conv, attention) + elements every dispatched op wrote. A property of the program and the
    shapes, not of the machine: the same on any load. (None, 0.0) when the forward fails."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    written = [0]

    class _Elements(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in flatten_outputs(out):
                if isinstance(t, torch.Tensor):
                    written[0] += t.numel()
            return out

    try:
        with FlopCounterMode(display=False) as flops, _Elements():
            _, o = run_forward(model, guesses, 0)
    except Exception:  # noqa: BLE001
        return None, 0.0
    return o, float(flops.get_total_flops() + written[0])


def scale_inputs(model, guesses, out, target_numel: int, deadline: float, max_forward_s: float,
                 max_work: float | None = None):
    """Double free dimensions (those whose doubling still runs) until the largest input or output
    would pass ``target_numel`` or one forward's work (``forward_work``: FLOPs + elements written) would
    pass ``max_work`` (the miner's budget: a heavy module, attention over many tokens, stops growing early
    instead of timing out). Returns (guesses, out).

    Deterministic: every stop is decided from the program and its shapes, never from wall time, so the
    same source gives the same shapes (and task ids) on any machine load. ``deadline`` (on synth.mine.own_clock's
    clock, which a busy machine does not advance) is a safety net only (a module whose doublings all still
    fit would otherwise take long); ``max_forward_s`` is unused
    here and kept for the signature's callers."""
    max_work = DEFAULT_SCALE_WORK if max_work is None else float(max_work)
    moves = [("batch",)] + [(i, d) for i, g in enumerate(guesses) for d in range(len(g.shape))]

    def apply(gs, move):
        gs = [g.copy() for g in gs]
        if move == ("batch",):
            b = gs[0].shape[0] if gs[0].shape else None
            for g in gs:
                if g.shape and g.shape[0] == b:
                    g.shape[0] *= 2
        else:
            i, d = move
            gs[i].shape[d] *= 2
        return gs

    if forward_work(model, guesses)[1] > max_work:  # already at the cap (a call site's full-size model)
        return guesses, out
    live = list(moves)
    i = 0
    while live and own_clock() < deadline:
        move = live[i % len(live)]
        trial = apply(guesses, move)
        if _numel_metric(trial, out) > target_numel:
            live.remove(move)
            continue
        o, work = forward_work(model, trial)
        if o is None or work > max_work or _numel_metric(trial, o) > target_numel:
            live.remove(move)
            continue
        guesses, out = trial, o
        i += 1
    return guesses, out
