"""Deduce the forward inputs of a constructed module, scale them, then apply the filters.

Runs inside the sandbox's forked children (synth/input_sandbox.py), never in the parent, on a model
that synth/init_args.py built. :func:`deduce_inputs` finds forward inputs (first layer of the module,
then error messages such as "mat1 and mat2 shapes cannot be multiplied" or "expected input[...] to
have 16 channels"); :func:`scale_inputs` doubles free dimensions toward ``target_numel``;
:func:`apply_filters` checks the filters in FILTERS order at the final shapes.

Deduction is heuristic: a module that needs inputs it cannot guess is counted as not deduced, and a
module that detects it is being probed is not caught by the filters.

This file uses only the standard library at import time (torch is imported inside the sandbox), so
the parent can import FILTERS from here.
"""

from __future__ import annotations

import re
import sys
import time

from synth.init_args import DeductionFailed, is_memory_error, required_params

FILTERS = ("float_output", "no_io_or_randomness", "deterministic", "input_dependent", "runtime")


# ============================================================================ forward inputs


class InputGuess:
    def __init__(self, kind: str, shape: list[int], hi: int = 2):
        self.kind, self.shape, self.hi = kind, list(shape), hi

    def key(self):
        return (self.kind, tuple(self.shape), self.hi)

    def copy(self) -> "InputGuess":
        return InputGuess(self.kind, self.shape, self.hi)

    def make(self, gen):
        import torch

        if self.kind == "int":
            return torch.randint(0, max(self.hi, 1), self.shape, generator=gen)
        return torch.randn(self.shape, generator=gen)

    def as_dict(self, name: str) -> dict:
        return {"name": name, "kind": self.kind, "shape": self.shape, "hi": self.hi,
                "dtype": "int64" if self.kind == "int" else "float32"}


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
    return InputGuess("float", [2, 16, base])


def _dims_of(shape_text: str) -> list[int]:
    return [int(x) for x in re.findall(r"-?\d+", shape_text)]


def adjust_inputs(guesses: list[InputGuess], msg: str, model) -> bool:
    """Change the guesses in place from an error message; False when the message gives no hint."""
    def set_last(value: int, old: int | None = None) -> bool:
        for g in guesses:
            if g.kind == "float" and (old is None or g.shape[-1] == old):
                g.shape[-1] = value
                return True
        return False

    def set_rank(rank: int) -> bool:
        changed = False
        for g in guesses:
            if g.kind == "float" and len(g.shape) != rank:
                g.shape = _shape_of_rank(rank, g.shape[1] if len(g.shape) > 3 else g.shape[-1])
                changed = True
        return changed

    m = re.search(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", msg)
    if m:
        return set_last(int(m.group(3)), int(m.group(2))) or set_last(int(m.group(3)))
    m = re.search(r"expected input\[([^\]]*)\] to have (\d+) channels", msg)
    if m:
        seen = _dims_of(m.group(1))  # an unbatched input shows up with a leading 1 added
        for g in guesses:
            if g.kind == "float" and len(g.shape) > 1:
                if len(seen) != len(g.shape) and len(seen) > 2:
                    g.shape = [2, int(m.group(2))] + seen[2:]
                else:
                    g.shape[1] = int(m.group(2))
                return True
    m = re.search(r"running_mean should contain \d+ elements not (\d+)", msg) or re.search(
        r"Expected (?:weight|bias) to be (?:a vector )?of size equal to the number of channels in input.*?(\d+)", msg)
    if m:
        for g in guesses:
            if g.kind == "float" and len(g.shape) > 1:
                g.shape[1] = int(m.group(1))
                return True
    m = re.search(r"normalized_shape=\[([^\]]*)\], expected input with shape \[\*, ([^\]]*)\]", msg)
    if m:
        tail = _dims_of(m.group(2))
        for g in guesses:
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
    if m:
        return set_rank(int(m.group(1)))
    m = re.search(r"Dimension out of range \(expected to be in range of \[-(\d+), (\d+)\], but got (-?\d+)\)", msg)
    if m:
        need = abs(int(m.group(3))) + (1 if int(m.group(3)) >= 0 else 0)
        return set_rank(max(need, int(m.group(1)) + 1))
    m = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension (\d+)", msg)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        for g in guesses:
            if g.kind == "float":
                for d in range(len(g.shape) - 1, -1, -1):
                    if g.shape[d] in (a, b) and d > 0:
                        g.shape[d] = b if g.shape[d] == a else a
                        return True
    if re.search(r"scalar type[s]? (Long|Int)|Expected tensor for argument #1 'indices'|expected scalar type Long|"
                 r"tensors used as indices must be long|only integer tensors", msg):
        for g in guesses:
            if g.kind == "float":
                g.kind, g.shape = "int", g.shape[:2] if len(g.shape) > 2 else g.shape
                g.hi = min([e.num_embeddings for e in model.modules() if hasattr(e, "num_embeddings")] or [2])
                return True
    if "index out of range in self" in msg:
        for g in guesses:
            if g.kind == "int" and g.hi > 2:
                g.hi = 2
                return True
    return False


def _shape_of_rank(rank: int, c: int) -> list[int]:
    """Feature size c last for ranks up to 3 ([N, L, C]), second for images and volumes ([N, C, H, W])."""
    if rank >= 4:
        return [2, c] + [16] * (rank - 2)
    return {1: [c], 2: [2, c], 3: [2, 16, c]}.get(rank, [c])


def _fallbacks(n: int, dims: list[int]) -> list[list[InputGuess]]:
    return [[InputGuess("float", _shape_of_rank(rank, d)) for _ in range(n)] for rank in (3, 2, 4, 1, 5) for d in dims]


def _forward_params(model):
    import inspect

    sig = inspect.signature(model.forward)
    req, kwonly = required_params(sig)
    if kwonly:
        raise DeductionFailed("forward", "keyword_only_args", ", ".join(p.name for p in kwonly))
    names = [p.name for p in req]
    if not names:  # forward(self, input_ids=None, ...): feed the first optional positional parameter
        optional = [p.name for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        names = optional[:1] or (["x"] if any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values()) else [])
    return names


def run_forward(model, guesses: list[InputGuess], seed: int):
    import torch

    gen = torch.Generator().manual_seed(seed)
    xs = [g.make(gen) for g in guesses]
    with torch.no_grad():
        return xs, model(*xs)


def deduce_inputs(model, base: int, init_ints: list[int], deadline: float, max_attempts: int = 40):
    """(input names, guesses, output) of the first forward call that runs; DeductionFailed otherwise."""
    names = _forward_params(model)
    hint = first_layer_hint(model, base)
    guesses = [hint.copy() for _ in names]
    plans = _fallbacks(len(names), list(dict.fromkeys([hint.shape[-1], *init_ints, base])))
    seen, last = set(), ""
    for _ in range(max_attempts):
        if time.monotonic() > deadline:
            break
        seen.add(tuple(g.key() for g in guesses))
        try:
            _, out = run_forward(model, guesses, 0)
            return names, guesses, out
        except Exception as e:  # noqa: BLE001
            if is_memory_error(e):
                raise DeductionFailed("forward", "memory", str(e)[:300])
            last = f"{type(e).__name__}: {str(e)[:300]}"
            trial = [g.copy() for g in guesses]
            if adjust_inputs(trial, str(e), model) and tuple(g.key() for g in trial) not in seen:
                guesses = trial
                continue
            while plans and tuple(g.key() for g in plans[0]) in seen:
                plans.pop(0)
            if not plans:
                break
            guesses = plans.pop(0)
    raise DeductionFailed("forward", "forward_failed", last or "no forward attempt succeeded")


# ============================================================================ outputs, scaling, filters


def flatten_outputs(out) -> list:
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flatten_outputs(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in flatten_outputs(o)]
    return [out]


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


def scale_inputs(model, guesses, out, target_numel: int, deadline: float, max_forward_s: float):
    """Double free dimensions (those whose doubling still runs) until the largest input or output
    would pass ``target_numel``. Returns (guesses, out)."""
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

    def ok(gs):
        t0 = time.perf_counter()
        try:
            _, o = run_forward(model, gs, 0)
        except Exception:  # noqa: BLE001
            return None, 0.0
        return o, time.perf_counter() - t0

    live = list(moves)
    i = 0
    while live and time.monotonic() < deadline:
        move = live[i % len(live)]
        trial = apply(guesses, move)
        if _numel_metric(trial, out) > target_numel:
            live.remove(move)
            continue
        o, dt = ok(trial)
        if o is None or dt > max_forward_s / 4 or _numel_metric(trial, o) > target_numel:
            live.remove(move)
            continue
        guesses, out = trial, o
        i += 1
    return guesses, out


class IOWatch:
    """sys.addaudithook recorder of file, socket and process events while ``active``."""

    EVENTS = ("open", "socket.", "subprocess.", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.remove",
              "os.rename", "os.mkdir", "shutil.", "urllib.")

    def __init__(self):
        self.active = False
        self.events: list[str] = []
        self.ignore = tuple(p for p in {sys.prefix, sys.base_prefix, sys.exec_prefix} if p)
        sys.addaudithook(self.hook)

    def hook(self, event: str, args) -> None:
        if not self.active or not event.startswith(self.EVENTS):
            return
        if event == "open" and args and isinstance(args[0], str) and args[0].startswith(self.ignore):
            return  # lazy imports of installed modules
        self.events.append(f"{event}{args!r}"[:200])


def _rng_state():
    import random

    import torch

    state = [torch.get_rng_state(), random.getstate()]
    np = sys.modules.get("numpy")
    if np is not None:
        state.append(np.random.get_state()[1].copy())
    return state


def _same_state(a, b) -> bool:
    import torch

    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor):
            if not torch.equal(x, y):
                return False
        elif hasattr(x, "shape"):
            if not (x == y).all():
                return False
        elif x != y:
            return False
    return True


def _same_outputs(a, b) -> bool:
    """Bitwise equality of two outputs (CPU, one thread: a deterministic module repeats exactly)."""
    import torch

    fa, fb = flatten_outputs(a), flatten_outputs(b)
    if len(fa) != len(fb):
        return False
    for x, y in zip(fa, fb):
        if isinstance(x, torch.Tensor):
            if not isinstance(y, torch.Tensor) or x.shape != y.shape or not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


def apply_filters(model, guesses, out, watch: IOWatch, max_forward_s: float, min_forward_s: float) -> tuple[str | None, str, float]:
    """(first failed filter or None, detail, forward seconds) in FILTERS order, at the final shapes."""
    import torch

    leaves = flatten_outputs(out)
    tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
    if not tensors:
        return "float_output", "forward returns no tensor", 0.0
    bad = [type(t).__name__ if not isinstance(t, torch.Tensor) else str(t.dtype) for t in leaves
           if t is not None and not (isinstance(t, torch.Tensor) and t.is_floating_point())]
    if bad:
        return "float_output", "non floating-point outputs: " + ", ".join(bad), 0.0
    if any(not torch.isfinite(t).all() for t in tensors):
        return "float_output", "outputs hold NaN or inf", 0.0
    before = _rng_state()
    watch.active = True
    try:
        run_forward(model, guesses, 1)
    finally:
        watch.active = False
    if watch.events:
        return "no_io_or_randomness", "file/network/process access in forward: " + watch.events[0], 0.0
    if not _same_state(before, _rng_state()):
        return "no_io_or_randomness", "forward draws random numbers", 0.0
    xs, a = run_forward(model, guesses, 1)
    _, b = run_forward(model, guesses, 1)
    if not _same_outputs(a, b):
        return "deterministic", "two eval-mode runs on the same inputs disagree", 0.0
    _, c = run_forward(model, guesses, 2)
    if _same_outputs(a, c):
        return "input_dependent", "output does not change when the inputs change", 0.0
    times = []
    for seed in (3, 4, 5):
        t0 = time.perf_counter()
        run_forward(model, guesses, seed)
        times.append(time.perf_counter() - t0)
    best = min(times)
    if not (min_forward_s <= best <= max_forward_s):
        return "runtime", f"forward takes {best * 1e3:.3f} ms, outside [{min_forward_s * 1e3:g}, {max_forward_s * 1e3:g}] ms", best
    return None, "", best


def output_specs(out) -> list[dict]:
    import torch

    return [{"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
            for t in flatten_outputs(out) if isinstance(t, torch.Tensor)]
