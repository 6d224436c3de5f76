"""False rejections of the verifier's front end on honest cpu-backend answers written the way frontier models write
KernelBench answers (backend "cpu"; no compiler needed).

The 50 candidates in tests/data/fidelity_cpu/ (``honest_*.py`` programs and ``honest_*.md`` model responses, the
task of each in ``tasks.json``, the task programs in ``tasks/``) were written by a helper session for 13 tasks (levels
1-3): at::parallel_for, OpenMP, AVX2 behind ``#if``, AT_DISPATCH, accessors, ``std::thread`` pools joined in the call,
TORCH_LIBRARY operators, a Python ``torch.library.custom_op`` around the kernel, an ``autograd.Function``, ``.T`` /
``.mT`` / ``reshape_as`` / ``type_as`` / ``torch.concat`` / ``ravel`` / ``squeeze_`` / ``unfold`` around the kernel,
lazy builds in forward, logging, dataclasses. Every one passes end to end on the cpu backend (each verified through
``verifier.entry.verify_candidate``; bench/results/HISTORY.md, fifth session); ten of them did not before the fix of
the views' allowlists (static_rules.TENSOR_METHOD_ALLOWED / TORCH_ALLOWED, common/ops.py ALLOWED_ATEN) and of
``torch.library`` (registering an operator is no compute). The end-to-end twins of those constructs are
tests/redteam/test_redteam_operator_routes.py (one build). Here: everything the verifier decides before the build, as
tests/test_fidelity_cuda_front.py does for CUDA. Fast: no compiles, no task run.

A second helper session (eighth session) added 50 more for 24 tasks (``honest_<task>_<x>``: bmm, minGPT attention,
conv + bias + relu, cross entropy, depthwise conv, ELU, Frobenius norm, GEMM + sigmoid + residual, group / instance /
3-D layer norm, KL divergence, training-mode BatchNorm in C++, log-softmax, matmul and its transposed form, matvec
with K = 32768, max over a dim with indices, max-pool, a 3-layer MLP, RMSNorm, sum over a dim, SwiGLU), each verified
end to end on the cpu backend; three of them were rejected before their fixes: a ``torch.autograd.profiler
.record_function`` range (static_rules.TORCH_ALLOWED), ``F.dropout(y, p=0.0)`` (static_judges.DROPOUT_CALLS, as
``nn.Dropout`` is) and ``torch.set_num_threads`` in ``__init__`` (put back to the slot's count in the child:
tests/test_verifier_run.py).

A third (thirteenth session) added 54 for 18 tasks (``honest13_<task>_<x>``, tasks ``t13_*``): GRU and LSTM cells,
embedding bag means with int64 indices, eval-mode BatchNorm (held, buffers, folded, a TORCH_LIBRARY operator), a
masked min with bool masks and tuple outputs, average pooling, a reverse cumulative sum (Kahan, blocked, threads),
broadcast affine maps over ``expand`` views, GEMM + LeakyReLU (reused output buffers, float64 inside), integer ops
and dtype promotions, masked attention (online softmax), softmax over channels returning a permuted view, a dilated
Conv1d, MLPs (``nn.ModuleList`` of own modules, pybind11 classes holding parameters), long row sums, and three naive
matmuls at 0.6-2.0 s a call. All 54 passed end to end on the cpu backend at 76850fa (each through ``kernelmill
verify``); the front-end changes of the session after it (compute functions handed on as values, C++ holding Python
objects) find nothing in any of them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_fidelity_cuda_front import front_findings

DATA = Path(__file__).resolve().parent / "data" / "fidelity_cpu"
TASKS = json.loads((DATA / "tasks.json").read_text())


def test_candidate_set():
    assert len(TASKS) >= 95 and len(set(TASKS.values())) >= 36
    for cand, task in TASKS.items():
        assert (DATA / cand).is_file() and (DATA / "tasks" / task).is_file(), (cand, task)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_honest_cpu_candidate_has_no_front_finding(name: str):
    assert front_findings((DATA / name).read_text(), "cpu") == []


@pytest.mark.parametrize("name", sorted(TASKS))
def test_engine_front_leaves_it_to_the_build(name: str):
    from verifier import screen

    task = (DATA / "tasks" / TASKS[name]).read_text()
    w = screen.front(task, (DATA / name).read_text(), "cpu", TASKS[name], Path(name).stem)
    assert w.verdict.status == "" and w.verdict.cheats == [], w.verdict
    assert w.torch_findings == []
