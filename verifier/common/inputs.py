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

from verifier.common.shapes import variant_get_inputs


def reference_numerics() -> None:
    """fp32 means fp32 for the reference: no TF32 in matmuls or cuDNN convolutions. Set in every process
    that computes a reference (the verifier and the execution child, before its tamper snapshot)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


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
    """The inputs of one trial: ``get_inputs()`` under the seed, on ``device``; with ``other_shape`` (a
    ``SizeChange`` as JSON) the inputs the task's own ``get_inputs`` makes with its size constants changed."""
    if other_shape:
        get_inputs = variant_get_inputs(program_text, other_shape)
    seed_everything(seed)
    with placement(device, program_text):
        inputs = to_device(list(get_inputs()), device)
    return inputs


def build_model(ref_mod, init_seed: int, device: str, program_text: str = "", eval_mode: bool = False):
    """``Model(*get_init_inputs())`` with weights drawn under ``init_seed``, in the mode it was constructed in
    (KernelBench's harness never calls ``.eval()``; ``eval_mode`` does), moved to ``device``;
    the process's fp32 numerics set to plain fp32 first (no TF32: verifier/judge/numerics.py).

    Constructed on the cpu (a program naming cuda is mapped there), as the execution child constructs
    ``ModelNew`` and as KernelBench's harness constructs both: the weights come from the cpu generator in
    both, so a ModelNew that creates its parameters in the same order as Model gets the same values even
    when their names or shapes differ and the state dict cannot be copied. (Built under the device, the
    reference drew its weights from the CUDA generator and every such honest candidate was wrong.)"""
    model, init = cpu_model(ref_mod, init_seed, program_text, eval_mode)
    return model.to(device), to_device(init, device)


def cpu_model(ref_mod, init_seed: int, program_text: str = "", eval_mode: bool = False):
    """:func:`build_model`'s model and init inputs on the cpu: host work only (the weights' draws, which take seconds
    for a large level-3 network), done before a process takes its hold on the device for the copy to it."""
    reference_numerics()
    init = init_inputs(ref_mod, init_seed, "cpu", program_text)
    seed_everything(init_seed)
    with placement("cpu", program_text):
        model = ref_mod.Model(*init)
    return (model.eval() if eval_mode else model), init


def init_inputs(ref_mod, init_seed: int, device: str, program_text: str = "") -> list:
    """``get_init_inputs()`` under the seed, drawn on the cpu (see build_model) and moved to ``device``."""
    seed_everything(init_seed)
    with placement("cpu", program_text):
        init = list(ref_mod.get_init_inputs())
    return to_device(init, device)


def tensors_of(obj) -> list:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in tensors_of(o)]
    return []


def nbytes(obj) -> int:
    return sum(t.numel() * t.element_size() for t in tensors_of(obj))


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``torch.equal`` (same shape, dtype and values), except that NaN equals NaN: a tensor holding NaN is left
    alone, not changed, where it was not written (an input drawn with NaN in it, an output whose reference has NaN
    where a task's op makes them). The check of a trial's inputs in the child, of a timed call's in the harness
    (``inputs_changed``) and of the outputs written after the clock's end read it so; -0.0 equals 0.0 as there."""
    if torch.equal(a, b):
        return True
    if a.shape != b.shape or a.dtype != b.dtype or not (a.is_floating_point() or a.is_complex()):
        return False
    b = b.to(a.device)
    return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def same(a: list, b: list) -> bool:
    """Identical inputs (tensors equal in shape, dtype and values, NaN equal to NaN as ``same_values`` reads them: a
    task that draws NaN into its inputs draws them again from the same seed; other values equal), read into the
    lists, tuples and dicts an input holds (a list of tensors is one input: ``==`` of two such lists asks a tensor for
    its truth value)."""
    if len(a) != len(b):
        return False
    return all(same_value(x, y) for x, y in zip(a, b))


def same_value(x, y) -> bool:
    """One input (or output) equal to another as ``same`` reads them: a tensor as ``same_values``, lists, tuples and
    dicts element by element, anything else by ``==``."""
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        return isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and same_values(x, y.to(x.device))
    if isinstance(x, (list, tuple)) or isinstance(y, (list, tuple)):
        return type(x) is type(y) and same(list(x), list(y))
    if isinstance(x, dict) or isinstance(y, dict):
        return (isinstance(x, dict) and isinstance(y, dict) and list(x) == list(y)
                and all(same_value(x[k], y[k]) for k in x))
    return bool(x == y)


def meta_input_bytes(get_inputs, program_text: str = "") -> int | None:
    """Bytes the inputs would take, found without allocating them (meta tensors); None if that fails."""
    try:
        with placement("meta", program_text):
            return nbytes(list(get_inputs()))
    except Exception:  # noqa: BLE001 - some programs cannot run on meta tensors; the caller draws for real
        return None


def meta_output_bytes(ref_mod, program_text: str = "") -> int | None:
    """Bytes the reference's outputs would take, found by running it on meta tensors (no weights or inputs are
    allocated); None where the program does not run on meta. A conv whose output is 16 times its 1 GiB input
    was admitted to planning by its input size and ran the device out of memory (technoabsurdist-l1-p63)."""
    try:
        with placement("meta", program_text), torch.no_grad():
            model = ref_mod.Model(*ref_mod.get_init_inputs())
            return nbytes(as_list(model(*ref_mod.get_inputs())))
    except Exception:  # noqa: BLE001 - data-dependent shapes, .item(), cpu-only ops: the caller plans without it
        return None


def as_list(out) -> list:
    """A model's output as a flat list of outputs: a tuple or list (a named tuple too) taken apart, and one nested in
    it (``output, (h, c)``, as ``nn.LSTM`` returns) flattened in order, so that the child, the harness and the judge
    read the same outputs whatever the nesting (a nested tuple was a C10 "not a plain torch.Tensor" for an honest
    candidate returning what its reference returns). A None inside them is an output left out and no output (a mined
    layer's ``return hidden, None`` for attention weights it did not compute: docs/ANTI_CHEAT.md class 107); a
    model that returns None itself is read as [None], a task fault (``outputs.reference_fault``)."""
    if isinstance(out, (list, tuple)):
        return [leaf for o in out if o is not None for leaf in as_list(o)]
    return [out]


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
