"""The filters a mined module passes before it becomes a task, checked at its final input shapes.

FILTERS, in the order :func:`apply_filters` checks them: ``float_output`` (every output a finite
floating-point tensor), ``no_io_or_randomness`` (no file, socket or process access and no draw from a
random generator during forward), ``deterministic`` (two runs on the same inputs agree bitwise),
``input_dependent`` (new inputs change the output), ``runtime`` (one forward within the limits, on one
CPU thread).

Runs inside the sandbox's forked children (synth/mine/input_sandbox.py). Not caught: a module that
detects it is being probed. This file uses only the standard library at import time (torch is
imported inside the sandbox), so the parent can import FILTERS from here.
"""

from __future__ import annotations

import random
import sys

from synth.mine.own_clock import own_clock  # forward times that do not grow with the machine's load

FILTERS = ("float_output", "no_io_or_randomness", "deterministic", "input_dependent", "runtime")


def flatten_outputs(out) -> list:
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flatten_outputs(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in flatten_outputs(o)]
    return [out]


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


def run_forward(model, guesses: list, seed: int):
    """(inputs, output) of one forward call on fresh inputs drawn with ``seed``; keyword guesses go by name."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    xs = [g.make(gen) for g in guesses]
    args = [x for g, x in zip(guesses, xs) if not g.keyword]
    kwargs = {g.name: x for g, x in zip(guesses, xs) if g.keyword}
    with torch.no_grad():
        return xs, model(*args, **kwargs)


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
    times = []

    def timed(seed: int):
        t0 = own_clock()
        res = run_forward(model, guesses, seed)
        times.append(own_clock() - t0)
        return res

    before = _rng_state()
    t0 = own_clock()  # read outside the watch: the clock reads /proc, which the watch would count as I/O
    watch.active = True
    try:
        run_forward(model, guesses, 1)
    finally:
        watch.active = False
    first = own_clock() - t0
    if first > 1.5 * max_forward_s:  # over the limit: the timed runs below would only cost more time
        return "runtime", f"forward takes {first * 1e3:.3f} ms (one run), over {max_forward_s * 1e3:g} ms", first
    if watch.events:
        return "no_io_or_randomness", "file/network/process access in forward: " + watch.events[0], 0.0
    if not _same_state(before, _rng_state()):
        return "no_io_or_randomness", "forward draws random numbers", 0.0
    xs, a = timed(1)
    _, b = timed(1)
    if not _same_outputs(a, b):
        return "deterministic", "two eval-mode runs on the same inputs disagree", 0.0
    _, c = timed(2)
    if _same_outputs(a, c):
        return "input_dependent", "output does not change when the inputs change", 0.0
    best = min(times)  # the three runs above (warm: the watched run came first), not three more
    if not (min_forward_s <= best <= max_forward_s):
        return "runtime", f"forward takes {best * 1e3:.3f} ms, outside [{min_forward_s * 1e3:g}, {max_forward_s * 1e3:g}] ms", best
    return None, "", best


def output_specs(out) -> list[dict]:
    import torch

    return [{"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
            for t in flatten_outputs(out) if isinstance(t, torch.Tensor)]
