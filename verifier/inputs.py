"""Trial inputs and the reference model, built the same way in every process from a seed.

KernelBench programs build their inputs in many ways: ``torch.randn(...)`` on the cpu, ``.cuda()`` or
``device="cuda"`` in ``get_inputs``, plain numbers among the inputs and constructor arguments, inputs of
several GB. This module makes one rule for all of them:

- inputs are drawn under ``torch.device(device)`` (so a 6 GB input is generated on the GPU, never on the
  host) and moved to the device; the same seed gives the same inputs in the verifier process and in an
  execution child, so inputs never travel through files (``reproducible`` checks that they do);
- a program that names ``cuda`` runs on the cpu backend too: ``DevicePlacement`` maps every cuda device
  it asks for to the backend's device.

Guarantees: ``draw_inputs(get_inputs, seed, device)`` is deterministic for programs whose randomness comes
from torch, ``random`` or numpy's global generator. Not guaranteed: programs that read files, the clock or
other generators (``reproducible`` returns False and the verifier ships their inputs instead).
"""

from __future__ import annotations

import contextlib
import math
import random
import sys

import torch
from torch.overrides import TorchFunctionMode


def _map_device(dev, target: torch.device):
    if dev is None:
        return dev
    try:
        d = torch.device(dev) if not isinstance(dev, int) else torch.device("cuda", dev)
    except (RuntimeError, TypeError):
        return dev
    return target if d.type == "cuda" else dev


class DevicePlacement(TorchFunctionMode):
    """Inside this mode, torch calls that name a cuda device get the target device instead
    (``device=`` arguments, ``Tensor.cuda()``, ``Tensor.to("cuda")``, ``Module.cuda()``)."""

    def __init__(self, device: str):
        super().__init__()
        self.target = torch.device(device)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0].to(self.target)
        if "device" in kwargs:
            kwargs["device"] = _map_device(kwargs["device"], self.target)
        if func is torch.Tensor.to and len(args) > 1 and isinstance(args[1], (str, torch.device, int)) \
                and not isinstance(args[1], bool):
            args = (args[0], _map_device(args[1], self.target), *args[2:])
        return func(*args, **kwargs)


def placement(device: str, program_text: str = ""):
    """The context that runs task code on ``device``: the device as default, plus cuda -> device mapping
    when the backend is not cuda and the program names cuda (the mode costs Python time per torch call)."""
    stack = contextlib.ExitStack()
    stack.enter_context(torch.device(device))
    if torch.device(device).type != "cuda" and "cuda" in program_text:
        stack.enter_context(DevicePlacement(device))
    return stack


def seed_everything(seed: int) -> None:
    """torch (every device), ``random`` and numpy's global generator when numpy is loaded."""
    torch.manual_seed(seed)
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed % 2**32)


def to_device(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(o, device) for o in obj)
    return obj


def draw_inputs(get_inputs, seed: int, device: str, program_text: str = "", other_shape: str = "") -> list:
    """The inputs of one trial: ``get_inputs()`` under the seed, on ``device``; with ``other_shape`` the
    extra-shape variant of the same draw (``other_shape_inputs``)."""
    seed_everything(seed)
    with placement(device, program_text):
        inputs = to_device(list(get_inputs()), device)
        if other_shape:
            inputs = other_shape_inputs(inputs, other_shape)
    return inputs


def other_shape_inputs(inputs: list, mode: str) -> list:
    """The inputs with their first dimension changed, S -> S + S//2 + 1: ``all_matching`` changes every
    tensor whose first dimension is S, ``first_only`` the first tensor only. New values come from the
    (seeded) generator, so the variant is as reproducible as the draw."""
    tensors = [x for x in inputs if isinstance(x, torch.Tensor) and x.dim() >= 1]
    if not tensors:
        return inputs
    s = tensors[0].shape[0]
    s2 = s + s // 2 + 1
    new = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] == s and \
                (mode == "all_matching" or x is tensors[0]):
            shape = (s2, *x.shape[1:])
            new.append(torch.randn(shape, dtype=x.dtype, device=x.device) if x.is_floating_point() else
                       torch.randint(0, 8, shape, dtype=x.dtype, device=x.device))
        else:
            new.append(x)
    return new


def build_model(ref_mod, init_seed: int, device: str, program_text: str = ""):
    """``Model(*get_init_inputs())`` with weights drawn under ``init_seed``, on ``device``, in eval mode."""
    seed_everything(init_seed)
    with placement(device, program_text):
        init = list(ref_mod.get_init_inputs())
        seed_everything(init_seed)
        model = ref_mod.Model(*init)
    return model.to(device).eval(), init


def init_inputs(ref_mod, init_seed: int, device: str, program_text: str = "") -> list:
    seed_everything(init_seed)
    with placement(device, program_text):
        return list(ref_mod.get_init_inputs())


def tensors_of(obj) -> list:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in tensors_of(o)]
    return []


def nbytes(obj) -> int:
    return sum(t.numel() * t.element_size() for t in tensors_of(obj))


def same(a: list, b: list) -> bool:
    """Bit-identical inputs (tensors equal in shape, dtype and values; other values equal)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(x, y.to(x.device)):
                return False
        elif x != y:
            return False
    return True


def meta_input_bytes(get_inputs, program_text: str = "") -> int | None:
    """Bytes the inputs would take, found without allocating them (meta tensors); None if that fails."""
    try:
        with placement("meta", program_text):
            return nbytes(list(get_inputs()))
    except Exception:  # noqa: BLE001 - some programs cannot run on meta tensors; the caller draws for real
        return None


def as_list(out) -> list:
    """A model's output as a list of outputs."""
    return list(out) if isinstance(out, (list, tuple)) else [out]


def digest(outputs: list) -> list[list[float]]:
    """Per output tensor: [sum, sum of |x|, sum of x^2, numel] in float64. What a reference output computed in
    the candidate's process before the candidate runs may leave behind: enough to tell whether torch computes
    the same there, too little to rebuild the output from (a tensor of fewer than 4 elements is reduced to its
    numel alone)."""
    out = []
    for t in outputs:
        if not isinstance(t, torch.Tensor):
            out.append([])
            continue
        n = t.numel()
        if n < 4 or t.is_complex():
            out.append([float(n)])
            continue
        d = t.detach().to(torch.float64)
        out.append([float(d.sum()), float(d.abs().sum()), float((d * d).sum()), float(n)])
    return out


def digests_match(here: list[list[float]], refs: list, rel: float = 1e-6) -> bool:
    """Whether digests taken in the candidate's process agree with the verifier's reference outputs (errors of
    about ``rel`` per element, as the element-wise check of the other trials allows; NaN equals NaN)."""
    mine = digest(refs)
    if len(here) != len(mine):
        return False
    for h, r in zip(here, mine):
        if len(h) != len(r) or (len(r) == 1 and h != r):
            return False
        if len(r) == 1:
            continue
        n, scale = r[3], r[1]
        for a, b, tol in ((h[0], r[0], rel * (n + scale)), (h[1], r[1], rel * (n + scale)),
                          (h[2], r[2], 4 * rel * (n + r[2]))):
            if math.isnan(b) and math.isnan(a):
                continue
            if math.isinf(b) and a == b:
                continue
            if not abs(a - b) <= tol:
                return False
    return True
