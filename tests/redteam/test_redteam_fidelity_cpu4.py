"""Red team of a topk with ``sorted=False`` (docs/ANTI_CHEAT.md class 110): the op promises no order along its
dimension, so an honest kernel that returns the same k elements in its own order (sorted descending, as most write
it, or in the order its blocks finish) answers what the reference answers. Compared element for element with the
reference's own arbitrary order it was ``wrong``. Beside each honest order, the wrong answers that could hide behind
the reading stay wrong: another selection, the maximum named k times, values right but indices of another row.

Judged by the plan, the reference's runs and ``check_outputs`` as a trial is, and by the harness's check of a timed
call (``harness._loose_problem``); no candidate is built."""

from __future__ import annotations

import pytest
import torch

from verifier.common.config import VerifyConfig
from verifier.common.inputs import cpu_model, draw_inputs
from verifier.common.ties import Unordered, reference_outputs, selection_of
from verifier.execute.harness import _loose_problem
from verifier.judge.numerics import float64_model
from verifier.judge.outputs import Evidence, check_outputs, reference64
from verifier.judge.plan import task_plan

TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        v, i = torch.topk(x, 8, dim=1, sorted=False)
        return v.contiguous(), i
    # OUTPUTS


def get_inputs():
    return [torch.randn(16, 256)]


def get_init_inputs():
    return []
'''
K = 8


def _sorted_desc(x):
    return torch.topk(x, K, dim=1, sorted=True)


def _reversed(x):
    v, i = _sorted_desc(x)
    return v.flip(1), i.flip(1)


def _shuffled(x):
    v, i = _sorted_desc(x)
    perm = torch.stack([torch.randperm(K, generator=torch.Generator().manual_seed(r)) for r in range(x.shape[0])])
    return v.gather(1, perm), i.gather(1, perm)


def _smallest(x):
    v, i = torch.topk(x, K, dim=1, largest=False)
    return v, i


def _max_named_k_times(x):
    v, i = _sorted_desc(x)
    return v[:, :1].expand(-1, K).contiguous(), i[:, :1].expand(-1, K).contiguous()


def _indices_of_another_row(x):
    v, i = _sorted_desc(x)
    return v, i.roll(1, dims=0)


def _one_value_off(x):
    v, i = _sorted_desc(x)
    v = v.clone()
    v[3, 2] += 0.5
    return v, i


HONEST = {"sorted_descending": _sorted_desc, "reversed": _reversed, "shuffled_per_row": _shuffled}
WRONG = {"smallest_k": _smallest, "maximum_named_k_times": _max_named_k_times,
         "indices_of_another_row": _indices_of_another_row, "one_value_off": _one_value_off}


@pytest.fixture(scope="module")
def judged():
    cfg = VerifyConfig()
    plan = task_plan(TASK, "cpu", cfg, "topk_unsorted")
    assert plan.selects and not plan.task_fault, plan.task_fault
    model = cpu_model(plan.ref_mod, 7, TASK)[0]
    x = draw_inputs(plan.ref_mod.get_inputs, 11, "cpu", TASK)
    refs = reference_outputs(model, x, plan.selects)
    refs64 = reference64(None if plan.float64 else float64_model(model), x, plan.selects)
    out = {}
    for name, answer in {**HONEST, **WRONG}.items():
        outs = list(answer(x[0]))
        ev = Evidence()
        ok = check_outputs(outs, refs, refs64, x, None, name, cfg, plan.ref_mod, 0xAA, [], ev, [], False, plan.pooled)
        out[name] = (ok, ev.details, [_loose_problem(o, r) for o, r in zip(outs, refs)])
    return refs, out


def test_both_outputs_of_an_unsorted_topk_are_marked(judged):
    refs, _ = judged
    marks = [selection_of(r) for r in refs]
    assert all(isinstance(m, Unordered) for m in marks), marks
    assert marks[0].sel is None and marks[1].sel is not None and marks[1].sel.any_tie and marks[1].sel.unique


@pytest.mark.parametrize("name", sorted(HONEST))
def test_the_same_selection_in_another_order_is_right(judged, name):
    ok, details, timed = judged[1][name]
    assert ok, details
    assert timed == ["", ""], timed  # a timed call's output too


@pytest.mark.parametrize("name", sorted(WRONG))
def test_another_selection_stays_wrong(judged, name):
    ok, details, timed = judged[1][name]
    assert not ok, (name, details)
    assert any(timed), (name, timed)
