"""docs/ANTI_CHEAT.md class 29: special-casing the extra shape when it is a fixed function of the task's sizes.

A kernel correct for exactly the benchmark size and the one extra size a fixed 3/2 step gives (384 and 576) passed
every trial. The step is drawn at random per plan, in the verifier's process, among 5/4, 3/2, 7/4 and 2 of the
task's own size constants (verifier/common/shapes.py SIZE_RATIOS): no single extra size can be counted on."""

import torch

from verifier.common.inputs import build_model, draw_inputs
from verifier.common.shapes import SIZE_RATIOS, size_changes
from verifier.judge.plan import _pick_size_change, load_reference

TASK = '''import torch
import torch.nn as nn

N = 384


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
'''


def test_the_extra_shape_is_drawn_among_several_valid_steps():
    ref = load_reference(TASK, "square_matmul")
    model, _ = build_model(ref, 1, "cpu", TASK)
    inputs = draw_inputs(ref.get_inputs, 1, "cpu", TASK)
    picked = {_pick_size_change(ref, model, TASK, 1, "cpu", inputs)[0] for _ in range(24)}
    sizes = {tuple(x.shape) for spec in picked for x in draw_inputs(ref.get_inputs, 2, "cpu", TASK, spec)}
    # 384 becomes 480, 576, 672 or 768; 24 draws all giving one of them has probability 4 x 4^-24
    assert len(picked) >= 2 and all(s[0] == s[1] != 384 for s in sizes), sizes
    assert {(n, n) for n in (480, 576, 672, 768)} >= sizes, sizes


def test_every_step_keeps_the_tasks_contract():
    """Each step changes every size constant alike (square stays square) and is one the reference accepts."""
    ref = load_reference(TASK, "square_matmul")
    for ratio in SIZE_RATIOS:
        [change] = size_changes(TASK, ratio)[:1]
        a, b = draw_inputs(ref.get_inputs, 3, "cpu", TASK, change.to_json())
        assert a.shape == b.shape and a.shape[0] == a.shape[1] != 384
        assert torch.isfinite(a @ b).all()


SIZES_WRITTEN = {
    "tuple": "batch_size, dim = 64, 400",
    "list": "[batch_size, dim] = [64, 400]",
    "annotated": "batch_size: int = 64\ndim: int = 400",
    "chain": "batch_size = dim = 64",
}


def test_sizes_bound_several_at_once_or_annotated_are_changed_on_the_extra_shape():
    """docs/ANTI_CHEAT.md class 26: a kernel with ``ROWS = 64, COLS = 400`` baked in passed a task whose sizes were
    written ``batch_size, dim = 64, 400`` or ``batch_size: int = 64``: only ``NAME = value`` lines were read as size
    constants, so no extra shape was drawn and C14 could not fire. Every form is read and rewritten as that line
    is, and the reference's inputs at the extra shape are drawn from the program so changed."""
    for form, line in SIZES_WRITTEN.items():
        task = TASK.replace("N = 384", line).replace("torch.randn(N, N), torch.randn(N, N)",
                                                     "torch.randn(batch_size, dim), torch.randn(dim, batch_size)")
        ref = load_reference(task, f"sizes_{form}")
        model, _ = build_model(ref, 1, "cpu", task)
        inputs = draw_inputs(ref.get_inputs, 1, "cpu", task)
        spec = _pick_size_change(ref, model, task, 1, "cpu", inputs)[0]
        assert spec, form
        a, b = draw_inputs(ref.get_inputs, 2, "cpu", task, spec)
        assert a.shape != inputs[0].shape and a.shape == b.shape[::-1], (form, a.shape, inputs[0].shape)
        assert torch.isfinite(a @ b).all(), form
