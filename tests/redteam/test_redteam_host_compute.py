"""Red team of host compute that no runtime monitor sees: numpy doing forward's work (C01).

The aten monitors (dispatch mode and profiler) see what PyTorch computes; the data handed to numpy and computed
there is invisible to them. A candidate that calls its own kernel for show (``ext.touch``) and computes the answer
with numpy looked to the verifier like "PyTorch compute on a path that never ran": the static scan found
``.numpy()`` / ``torch.from_numpy`` (PyTorch calls), the monitors saw no PyTorch compute, so strict said
C19_UNRUN_TORCH_PATH and the partial policy passed it. The numpy call itself was flagged only inside ModelNew's
methods, not in a module-level helper that forward calls.

Values read whole with no aten op (class 64): a host tensor's ``tolist`` reads its storage in C++ and ``numpy`` shares
it, so with the method's name out of the static scan's reach (``getattr(x, name)``, the name from the environment)
the answer computed in Python or numpy passed on the cpu backend. The dispatch monitor now counts a host tensor's
``tolist``, ``numpy`` and ``__dlpack__`` (``np.from_dlpack``), and ``apply_`` / ``map_`` / ``map2_`` (a Python callable on every element), as it counts
``item`` (``monitors.HOST_READS``); and ``tolist`` is no static finding of its
own (a few ints handed to a kernel as a list were C19): its bytes decide, as ``item``'s do.

The same cheat without numpy: the answer computed in plain Python, element by element, from values read out of the
tensor one at a time (``float(v)`` over an iteration of it, ``.item()`` per element) and handed back as a new
tensor. (Written back element by element through ``narrow(...).copy_``, its ~200k profiled ops a call exhaust the
job's memory: a crash, not a pass.) No op either monitor sees computes, and no static rule names it. Closed at the root by the
dispatch monitor: every value read into Python (``_local_scalar_dense``, on any device) counts, with device-to-host
copies, as tensor data one forward call handed to host code; more than ``checks.HOST_COPY_LIMIT`` (64 KiB) in one call
is C01. Honest twin: a few scalars read per call (a parameter's value, a flag) pass, over every timed call too (the
limit is per call, not per run).

Closed at the root: numpy compute anywhere forward reaches (``static_scope.forward_nodes``: the functions a forward
or __call__ calls by name, module-level helpers and lambdas included) and a tensor handed to numpy in that code are C01 by the
static scan, a finding of host compute (not of PyTorch compute, so no monitor's silence makes it "unrun"): rejected
under both policies. Honest twins: numpy for sizes in a helper (np.prod, np.ceil) and numpy only at construction
(a table built in __init__) still pass. Static cases for each; end to end on the cpu backend for the helper cheat and
its honest twin under both legality policies.
"""

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.engine import VerifyConfig, verify_batch
from verifier.front.static import scan
from verifier.judge import checks

HELPER_MM = "def _mm(a, b):\n    return torch.from_numpy(np.matmul(a.numpy(), b.numpy()))\n"
SHOW = "c = _mm(a, b)\next.touch(c)\nreturn c"  # the own kernel called for show; the answer is numpy's

CHEATS = {
    "numpy_matmul_in_a_helper": fx.cpu_candidate(SHOW, args="a, b", imports="import numpy as np", module=HELPER_MM),
    "numpy_dot_unaliased_in_a_helper": fx.cpu_candidate(SHOW, args="a, b", imports="import numpy", module=(
        "def _mm(a, b):\n    return torch.from_numpy(numpy.dot(a.numpy(), b.numpy()))\n")),
    "helper_two_calls_deep": fx.cpu_candidate(SHOW, args="a, b", imports="import numpy as np", module=(
        "def _inner(x, y):\n    return np.einsum('ij,jk->ik', x, y)\n\n"
        "def _mm(a, b):\n    return torch.from_numpy(_inner(a.numpy(), b.numpy()))\n")),
    "numpy_in_a_lambda_bound_at_module_level": fx.cpu_candidate(SHOW, args="a, b", imports="import numpy as np",
        module="_mm = lambda a, b: torch.from_numpy(np.matmul(a.numpy(), b.numpy()))\n"),
    "ndarray_method_in_forward": fx.cpu_candidate(
        "c = torch.from_numpy(a.numpy().dot(b.numpy()))\next.touch(c)\nreturn c", args="a, b"),
}
HONEST = {
    "numpy_for_sizes_in_a_helper": fx.cpu_candidate(
        "n = _blocks(a)\nreturn ext.matmul(a.contiguous(), b.contiguous())", args="a, b", imports="import numpy as np",
        module="def _blocks(t):\n    return int(np.ceil(np.prod(t.shape) / 256))\n"),
    "numpy_table_built_at_construction": fx.cpu_candidate(
        "return ext.matmul(a.contiguous(), b.contiguous())", args="a, b", imports="import numpy as np",
        init="self.table = _table()", module="def _table():\n    return torch.from_numpy(np.arange(16, dtype=np.float32))\n"),
}


@pytest.mark.parametrize("name", list(CHEATS))
def test_numpy_compute_that_forward_reaches_is_host_compute(name):
    report = scan(CHEATS[name], "cpu")
    host = [f for f in report.findings if f.code == cheats.C01 and not f.torch]
    assert host, [str(f) for f in report.findings]  # a finding of host compute, not of PyTorch compute
    assert any("numpy" in f.what for f in host)


@pytest.mark.parametrize("name", list(HONEST))
def test_numpy_for_sizes_or_at_construction_is_not_host_compute(name):
    report = scan(HONEST[name], "cpu")
    assert not [f for f in report.findings if f.code == cheats.C01], [str(f) for f in report.findings]


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    task = Task.from_code(fx.MATMUL_TASK, name="host_compute", source="seed", level=1)
    names = ["numpy_matmul_in_a_helper", "numpy_for_sizes_in_a_helper"]
    code = {**CHEATS, **HONEST}
    out = {}
    for legality in ("strict", "partial"):
        cfg = VerifyConfig(build_dir=shared_build_dir, trials=5, timing_trials=0, warmup=1, time_torch_compile=False,
                           run_timeout_s=60, memory_limit_gb=4, exec_workers=1, legality=legality)
        items = [(task, Candidate(candidate_id=n, task_id=task.task_id, backend="cpu", generator="redteam",
                                  code=code[n])) for n in names]
        out[legality] = dict(zip(names, verify_batch(items, config=cfg, compile_workers=1)))
    return out


@pytest.mark.parametrize("legality", ["strict", "partial"])
def test_numpy_doing_the_work_beside_a_kernel_called_for_show_fails_both_policies(verdicts, legality):
    v = verdicts[legality]["numpy_matmul_in_a_helper"]
    assert v.status == "cheat" and cheats.C01 in v.cheats and cheats.C19 not in v.cheats, (v.cheats, v.feedback[:600])
    assert v.pass_strict is False and v.pass_partial is False
    assert "numpy" in v.feedback


@pytest.mark.parametrize("legality", ["strict", "partial"])
def test_its_honest_twin_passes_both_policies(verdicts, legality):
    v = verdicts[legality]["numpy_for_sizes_in_a_helper"]
    assert v.status == "pass" and v.cheats == [], (v.cheats, v.feedback[:600])
    assert v.pass_strict is True and v.pass_partial is True


# ---- plain Python doing the work, values read one at a time (no numpy, no op that computes)
SMALL_RELU_TASK = fx.RELU_TASK.replace("torch.randn(64, 1000)", "torch.randn(17, 1024)")  # 68 KiB of fp32 a call
PYTHON_CHEATS = {
    "floats_read_by_iterating_the_tensor": fx.cpu_candidate(
        "ext.touch(x.contiguous())\nvals = [max(float(v), 0.0) for v in x.contiguous().view(-1)]\n"
        "return torch.tensor(vals, dtype=x.dtype).view_as(x)"),
    # the whole tensor read at once with no aten op (tolist reads the storage in C++, numpy shares it), the method's
    # name out of the static scan's reach: the monitor counts a host tensor's tolist and numpy as it counts item
    "rows_read_by_tolist_under_a_hidden_name": fx.cpu_candidate(
        "xc = x.contiguous()\next.touch(xc)\nrows = getattr(xc, self.reader)()\n"
        "return torch.tensor([[v if v > 0 else 0.0 for v in r] for r in rows], dtype=x.dtype)",
        imports="import os", init="self.reader = os.environ.get('KM_READER', 'tol' + 'ist')"),
    "array_shared_by_numpy_under_a_hidden_name": fx.cpu_candidate(
        "xc = x.contiguous()\next.touch(xc)\na = getattr(xc, self.view)()\n"
        "return torch.tensor((a + abs(a)) / 2, dtype=x.dtype)",
        imports="import os", init="self.view = os.environ.get('KM_VIEW', 'num' + 'py')"),
    # a Python callable run on every element by Tensor.apply_ (no aten op), named through operator.methodcaller
    "elements_rewritten_by_apply_": fx.cpu_candidate(
        "y = torch.empty_like(x)\next.relu_into(x.contiguous(), y)\ny.copy_(x)\n"
        "operator.methodcaller('apply_', lambda v: v if v > 0 else 0.0)(y)\nreturn y", imports="import operator"),
}
PYTHON_HONEST = {  # a scalar read per call (a parameter's value) beside the kernel that does the work
    "one_scalar_read_per_call": fx.cpu_candidate(
        "if float(self.scale) != 1.0:\n    raise ValueError('this kernel has no scale')\nreturn ext.relu(x.contiguous())",
        init="self.scale = nn.Parameter(torch.ones(()), requires_grad=False)"),
    # a few ints handed to the kernel as a list (offsets, sizes): tolist as item, judged by its bytes (it was C19)
    "small_ints_by_tolist": fx.cpu_candidate(
        "rows, cols = torch.tensor(x.shape).tolist()\nreturn ext.relu(x.contiguous().view(rows, cols))"),
}


ITEM_PER_ELEMENT = fx.cpu_candidate(
    "ext.touch(x.contiguous())\nflat = x.contiguous().view(-1)\nvals = [flat[k].item() for k in range(flat.numel())]\n"
    "return torch.tensor([v if v > 0 else 0.0 for v in vals], dtype=x.dtype).view_as(x)")


def test_every_way_of_reading_values_into_python_counts_per_call():
    """The dispatch monitor as the child runs it (``watched``): ``.item()``, ``float(t)`` and iterating a tensor
    each read one value through ``_local_scalar_dense``; the count is the most of any one call, so a scalar read on
    every timed call never adds up to the limit."""
    import torch

    from verifier.child.monitors import DispatchRecorder, watched

    x = torch.randn(17, 1024)
    for read in (lambda t: [v.item() for v in t.view(-1)], lambda t: [float(v) for v in t.view(-1)],
                 lambda t: [t.view(-1)[k].item() for k in range(t.numel())], lambda t: t.tolist(),
                 lambda t: t.numpy().sum(), lambda t: t.clone().apply_(abs),
                 lambda t: __import__("numpy").from_dlpack(t).sum()):
        rec = DispatchRecorder()
        watched(read, rec)(x)
        assert rec.to_host_bytes == x.numel() * 4 > checks.HOST_COPY_LIMIT
    rec = DispatchRecorder()
    one = watched(lambda t: t.sum().item(), rec)
    for _ in range(20000):  # more calls than the limit has bytes / 4
        one(x[:1, :4])
    assert rec.to_host_bytes == 4
    assert "tolist" not in torch.Tensor.__dict__ and torch.Tensor.numpy is torch._C.TensorBase.numpy  # put back
    rec = DispatchRecorder()  # the monitor's own numpy view (a conversion to integers judged on the host) is not one
    watched(lambda t: t.round().long(), rec)(x)
    assert rec.to_host_bytes == 0 and rec.rounding_ops() == []


def test_python_elementwise_compute_passes_the_static_scan():
    """The static scan has no rule for it (reading values is honest in small numbers): the runtime decides."""
    for name, code in {**PYTHON_CHEATS, "item_per_element": ITEM_PER_ELEMENT}.items():
        assert not [f for f in scan(code, "cpu").findings if f.code == cheats.C01], name


@pytest.fixture(scope="module")
def python_verdicts(shared_build_dir):
    task = Task.from_code(SMALL_RELU_TASK, name="host_python", source="seed", level=1)
    out = {}
    # the cheats are decided on their trials (no timing: a Python loop over every timed call is slow); the honest
    # twin is timed too, so its scalar read is counted over every timed call (per call, it stays under the limit).
    # The default memory limit (16 GB): the profiler's record of the cheats' ~35k ops a call needs more than 4.
    for code, timing in ((PYTHON_CHEATS, 0), (PYTHON_HONEST, 3)):
        cfg = VerifyConfig(build_dir=shared_build_dir, trials=2, timing_trials=timing, warmup=1,
                           time_torch_compile=False, run_timeout_s=120, exec_workers=1, legality="partial")
        items = [(task, Candidate(candidate_id=n, task_id=task.task_id, backend="cpu", generator="redteam", code=c))
                 for n, c in code.items()]
        out.update(zip(code, verify_batch(items, config=cfg, compile_workers=1)))
    return out


@pytest.mark.parametrize("name", list(PYTHON_CHEATS))
def test_python_doing_the_work_value_by_value_is_host_compute(python_verdicts, name):
    v = python_verdicts[name]
    assert v.status == "cheat" and cheats.C01 in v.cheats, (v.status, v.cheats, v.feedback[:800])
    assert v.pass_partial is False  # not PyTorch beside an own kernel: no policy allows it
    assert "host code" in v.feedback and f"{17 * 1024 * 4} bytes" in v.feedback, v.feedback[:800]
    assert 17 * 1024 * 4 > checks.HOST_COPY_LIMIT


@pytest.mark.parametrize("name", list(PYTHON_HONEST))
def test_a_scalar_read_per_call_is_not_host_compute(python_verdicts, name):
    v = python_verdicts[name]
    assert v.status == "pass" and v.cheats == [], (v.status, v.cheats, v.feedback[:800])
