"""Classes 110 and 111 on cuda (tests/redteam/test_redteam_fidelity_cpu4.py has them on the cpu and says what they
are): the reference's runs on the device mark a topk with ``sorted=False`` and max pooling's indices as they do on the
cpu, the same selection in another order and another of a window's tied maxima pass, and the wrong answers beside
them stay wrong, in the judge and in the harness's check of a timed call. An index output that reaches the judge as a
host tensor (the reference's on the device) is judged, not the verifier's error: at 54a3136 a model-written argmax
kernel's verdict on one H100 was ``verifier_error`` (gather across two devices in the tie check, verifier/common/ties.py
``tie_resolved``)."""

import pytest
import torch

from tests.redteam.test_redteam_fidelity_cpu4 import (ADAPTIVE_HONEST, ADAPTIVE_TASK, ADAPTIVE_WRONG, HONEST, ONE_ELEMENT,
                                                      POOL_HONEST, POOL_TASK, POOL_WRONG, TASK, WRONG, judge)
from verifier.common.ties import Pooled, Unordered, selection_of

pytestmark = pytest.mark.gpu


ARGMAX_TASK = TASK.replace("v, i = torch.topk(x, 8, dim=1, sorted=False)\n        return v.contiguous(), i",
                           "return torch.argmax(torch.relu(x - 2.5), dim=1)")


# a row of 256 draws is all zeros after relu(x - 2.5) with probability 0.2: about three of the 16 rows tie
def _first_of_tied(x):  # torch.argmax's own answer: the first of the row's tied zeros
    return [torch.argmax(torch.relu(x - 2.5), dim=1)]


def _last_of_tied(x):  # the last of the tied zeros where torch documents the first: wrong
    r = torch.relu(x - 2.5)
    return [r.shape[1] - 1 - torch.argmax(r.flip(1), dim=1)]


ARGMAX_HONEST = {"first_of_tied_on_the_device": _first_of_tied,
                 "first_of_tied_on_the_host": lambda x: [o.cpu() for o in _first_of_tied(x)]}
ARGMAX_WRONG = {"last_of_tied_on_the_host": lambda x: [o.cpu() for o in _last_of_tied(x)]}


@pytest.fixture(scope="module")
def judged():
    return {"argmax": judge(ARGMAX_TASK, "argmax_of_relu_cuda", {**ARGMAX_HONEST, **ARGMAX_WRONG}, "cuda"),
            "topk": judge(TASK, "topk_unsorted_cuda", {**HONEST, **WRONG}, "cuda"),
            "pool": judge(POOL_TASK, "maxpool_indices_cuda", {**POOL_HONEST, **POOL_WRONG}, "cuda"),
            "adaptive": judge(ADAPTIVE_TASK, "adaptive_maxpool_indices_cuda", {**ADAPTIVE_HONEST, **ADAPTIVE_WRONG},
                              "cuda")}


def test_the_device_references_outputs_are_marked(judged):
    topk, pool, adaptive = judged["topk"][0], judged["pool"][0], judged["adaptive"][0]
    assert all(r.is_cuda for r in topk + pool + adaptive)
    assert isinstance(selection_of(adaptive[1]), Pooled) and selection_of(adaptive[1]).adaptive
    assert [type(selection_of(r)) for r in topk] == [Unordered, Unordered]
    assert isinstance(selection_of(pool[1]), Pooled) and selection_of(pool[0]) is None


@pytest.mark.parametrize("which,name", [("topk", n) for n in sorted(HONEST)] + [("pool", n) for n in sorted(POOL_HONEST)]
                         + [("adaptive", n) for n in sorted(ADAPTIVE_HONEST)]
                         + [("argmax", n) for n in sorted(ARGMAX_HONEST)])
def test_an_honest_order_or_tie_passes_on_cuda(judged, which, name):
    ok, details, timed, _ = judged[which][1][name]
    assert ok, details
    assert timed == [""] * len(judged[which][0]), timed


@pytest.mark.parametrize("which,name", [("topk", n) for n in sorted(WRONG)] + [("pool", n) for n in sorted(POOL_WRONG)]
                         + [("adaptive", n) for n in sorted(ADAPTIVE_WRONG)]
                         + [("argmax", n) for n in sorted(ARGMAX_WRONG)])
def test_a_wrong_selection_stays_wrong_on_cuda(judged, which, name):
    ok, details, timed, _ = judged[which][1][name]
    assert not ok, (name, details)
    assert any(timed) or name in ONE_ELEMENT, (name, timed)
