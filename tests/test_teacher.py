"""The teacher writes real kernels: compiled with load_inline on cpu and compared with the reference.

Compiling is the expensive part (~30-90 s per extension on 2 shared cores), so one session-scoped
fixture compiles the C++ of many candidates (every op family, plus planted-bug variants) into a
single extension, each candidate's source in its own C++ namespace. One full candidate file is
also exec'd as is (its own load_inline) to check the Python side: ModelNew, state copying.
"""

import os
import re
import signal
import time
from pathlib import Path

import pytest
import torch

from kernelmill.schema import Message
from synth.generate.generators import TeacherGenerator
from bench.lib.teacher_coverage import FAMILY_TASKS, family_tasks
from synth.teacher.lowering import lower_reference
from synth.teacher.writer import BUG_KINDS, TeacherDeclined, bug_sites, choose_bug, is_decline, write_candidate

ROOT = Path(__file__).resolve().parent.parent

SEEDS = {p.stem: p.read_text() for p in sorted((ROOT / "data" / "seed_tasks").glob("*/*.py"))}
ALL = {name: code for _, name, code in family_tasks()}
# planted bugs compiled into the shared extension: (task, bug) pairs where the bug must show on cpu
BUGGY = [("1_ReLU", "off_by_one"), ("5_Sum_Reduction_Dim", "missing_bounds_check"), ("2_Add_Broadcast", "wrong_stride"),
         ("8_Matmul", "missing_sync"), ("5_Sum_Reduction_Dim", "wrong_stride"), ("9_LayerNorm", "missing_sync")]


def _cpp(code: str) -> str:
    return re.search(r'CPP_SOURCE = r"""(.*?)"""', code, re.S).group(1)


@pytest.fixture(scope="session")
def combined():
    """One extension holding every family's cpu kernels (fN) and the bug variants (bN)."""
    from torch.utils.cpp_extension import load_inline

    entries = [(f"f_{i}", name, "") for i, name in enumerate(ALL)] + \
              [(f"b_{i}", name, bug) for i, (name, bug) in enumerate(BUGGY)]
    parts, funcs = ["#include <torch/extension.h>\n"], []
    for fn, name, bug in entries:
        prog = lower_reference(ALL[name])
        ns = "km_" + fn
        parts.append(f"namespace {ns} {{\n{_cpp(write_candidate(ALL[name], 'cpu', bug=bug))}\n}}\n")
        params = ", ".join(f"torch::Tensor {n}" for n in prog.arg_names)
        parts.append(f"torch::Tensor {fn}({params}) {{ return {ns}::forward({', '.join(prog.arg_names)}); }}\n")
        funcs.append(fn)
    # against the run's precompiled torch/extension.h for -O2 (tests/pch_prewarm.py makes it first in a whole-suite
    # run): what is tested is the kernels' behaviour, not how torch's header is read (50 s -> ~15 s on 2 cores)
    from verifier.build.pch import ensure_pch
    from verifier.common.config import VerifyConfig
    from verifier.common.spec import canonical_spec

    pch = ensure_pch(canonical_spec({"cpp_sources": "int f();", "functions": ["f"], "extra_cflags": ["-O2"]}),
                     VerifyConfig(pch=True).pch_root())
    ext = load_inline(name="km_test_teacher_families", cpp_sources="".join(parts), functions=funcs,
                      extra_cflags=["-O2"] + ([f"-I{pch}", "-Winvalid-pch"] if pch else []), verbose=False)
    return ext, {(name, bug): fn for fn, name, bug in entries}


def _run(ext_fn, code: str, inputs=None):
    """(reference output, kernel output) for a task, parameters taken from the reference Model."""
    ns: dict = {}
    exec(code, ns)
    torch.manual_seed(0)
    model = ns["Model"](*ns["get_init_inputs"]())
    xs = inputs if inputs is not None else ns["get_inputs"]()
    prog = lower_reference(code)
    args = []
    for e in prog.arg_exprs:
        if e.startswith("self."):
            args.append(model.get_parameter(e[5:]).detach())
        else:
            args.append(xs[prog.forward_params.index(e)])
    with torch.no_grad():
        return model(*xs), ext_fn(*args)


@pytest.mark.parametrize("name", list(ALL))
def test_family_kernel_matches_reference(combined, name):
    ext, fns = combined
    ref, out = _run(getattr(ext, fns[(name, "")]), ALL[name])
    assert out.shape == ref.shape and out.dtype == ref.dtype
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name,inputs", [
    ("1_ReLU", [torch.randn(7, 33)]),
    ("2_Add_Broadcast", [torch.randn(5, 17), torch.randn(17)]),
    ("7_Softmax", [torch.randn(3, 1001)]),
    ("8_Matmul", [torch.randn(19, 23), torch.randn(23, 11)]),
    ("9_LayerNorm", [torch.randn(9, 2048)]),
    ("linear_3d_gelu", [torch.randn(3, 5, 256)]),
])
def test_kernels_take_sizes_at_runtime(combined, name, inputs):
    ext, fns = combined
    ref, out = _run(getattr(ext, fns[(name, "")]), ALL[name], inputs)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name,bug", BUGGY)
def test_planted_bug_changes_the_result(combined, name, bug):
    """Inputs of the test's own, all positive: an element the buggy kernel skips keeps whatever its freshly
    allocated output held, and a block freed by an earlier test on the task's seed-0 inputs can hold the right
    answer there (CI saw off_by_one in ReLU pass that way). Fresh positive values leave no stale block equal."""
    ext, fns = combined
    ns: dict = {}
    exec(ALL[name], ns)
    torch.manual_seed(1000 + BUGGY.index((name, bug)))
    inputs = [x.abs() + 0.5 if torch.is_tensor(x) and x.is_floating_point() else x for x in ns["get_inputs"]()]
    # the buggy kernel runs in a forked child: a bug that writes out of bounds can corrupt the heap, and in this
    # process it crashed the test worker (CI saw a segfault); a crash is the bug noticed, as the verifier's child
    # would report it. Exit 0: the same result as the reference (unnoticed); 3: another result
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 4
        try:
            torch.set_num_threads(1)  # no OpenMP pool inherited across the fork
            ref, out = _run(getattr(ext, fns[(name, bug)]), ALL[name], inputs)
            code = 0 if out.shape == ref.shape and torch.allclose(out, ref, atol=1e-4, rtol=1e-4) else 3
        finally:
            os._exit(code)
    deadline = time.monotonic() + 120
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail(f"{bug} in {name}: the kernel did not finish in 120 s")
    status = done[1]
    assert os.WIFSIGNALED(status) or os.WEXITSTATUS(status) == 3, f"{bug} in {name} went unnoticed ({status})"


def test_full_candidate_file_runs_as_modelnew(monkeypatch):
    """The candidate file itself: module-level load_inline, ModelNew with Model's parameters."""
    import torch.utils.cpp_extension as ce

    from verifier.build.pch import ensure_pch
    from verifier.common.config import VerifyConfig
    from verifier.common.spec import canonical_spec

    # its load_inline as written, with the run's precompiled torch/extension.h for its -O3 on the include path
    # (tests/pch_prewarm.py makes it in a whole-suite run): 35 s -> ~18 s alone on the 2-core machine
    real = ce.load_inline

    making = []  # ensure_pch's own probe build calls load_inline too: that one goes straight through (it would
    # otherwise wait on the header's lock its caller holds)

    def load_inline(*args, **kw):
        if making or kw.get("cuda_sources"):
            return real(*args, **kw)
        flags = list(kw.get("extra_cflags") or [])
        making.append(True)
        try:
            pch = ensure_pch(canonical_spec({"cpp_sources": "int f();", "functions": ["f"], "extra_cflags": flags}),
                             VerifyConfig(pch=True).pch_root())
        finally:
            making.pop()
        return real(*args, **{**kw, "extra_cflags": flags + ([f"-I{pch}", "-Winvalid-pch"] if pch else [])})

    monkeypatch.setattr(ce, "load_inline", load_inline)
    code = SEEDS["11_Matmul_Bias_ReLU"]
    cand = write_candidate(code, "cpu")
    ref_ns, cand_ns = {}, {}
    exec(code, ref_ns)
    exec(compile(cand, "<candidate>", "exec"), cand_ns)
    torch.manual_seed(0)
    model = ref_ns["Model"](*ref_ns["get_init_inputs"]())
    new = cand_ns["ModelNew"](*ref_ns["get_init_inputs"]())
    new.load_state_dict(model.state_dict())
    x = ref_ns["get_inputs"]()
    with torch.no_grad():
        torch.testing.assert_close(new(*x), model(*x), atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------- no compile needed


def test_candidates_pass_static_checks_and_bugs_are_visible_in_source():
    from verifier.front.extract import check_candidate_shape
    from verifier.front.static import scan

    for _, name, code in family_tasks():
        for backend in ("cpu", "cuda"):
            cand = write_candidate(code, backend)
            assert not check_candidate_shape(cand, backend), (name, backend)
            assert not scan(cand, backend).findings, (name, backend, [str(f) for f in scan(cand, backend).findings])
            assert "load_inline(" in cand and "class ModelNew(nn.Module)" in cand
            if backend == "cuda":
                assert "__global__" in cand and "getCurrentCUDAStream" in cand
    fallback = write_candidate(SEEDS["7_Softmax"], "cpu", bug="forbidden_fallback")
    assert scan(fallback, "cpu").findings  # the planted fallback is caught statically
    nosync = write_candidate(SEEDS["8_Matmul"], "cuda", bug="missing_sync")
    good = write_candidate(SEEDS["8_Matmul"], "cuda")
    assert good.count("__syncthreads();") == nosync.count("__syncthreads();") + 1


def test_cuda_kernels_cover_the_families():
    src = {name: write_candidate(code, "cuda") for _, name, code in family_tasks()}
    assert "As[ty][tx]" in src["8_Matmul"] and "__shared__ float Bs" in src["8_Matmul"]  # tiled
    assert "km_block_max" in src["7_Softmax"] and "_softmax_cols" in src["log_softmax_dim1_of_3d"]
    assert "_layernorm" in src["9_LayerNorm"] and "_reduce_rows" in src["10_RMSNorm"]
    assert "blockIdx.z" in src["bmm"]
    # a fused chain is one pointwise kernel, not one per op
    assert src["12_Scale_Add_Tanh"].count("_pointwise(float*") == 1


def test_deterministic_and_bug_share():
    code = SEEDS["7_Softmax"]
    assert write_candidate(code, "cuda", variant=1) == write_candidate(code, "cuda", variant=1)
    assert write_candidate(code, "cuda", variant=0) != write_candidate(code, "cuda", variant=1)
    bugs = [choose_bug(code, "cpu", i, 4, 0.5, seed=0) for i in range(4)]
    assert sum(1 for b in bugs if b) == 2 and all(b in BUG_KINDS for b in bugs if b)
    assert [choose_bug(code, "cpu", i, 4, 0.0, seed=0) for i in range(4)] == [""] * 4
    kinds = {choose_bug(c, "cpu", i, 2, 1.0, seed=s) for c in ALL.values() for i in range(2) for s in range(3)}
    assert set(BUG_KINDS) <= kinds  # every kind gets planted somewhere
    for name, code in ALL.items():
        assert "off_by_one" in bug_sites(lower_reference(code), "cpu")


def test_teacher_generator_turns():
    from synth.generate.prompts import build_prompt
    from kernelmill.schema import Task

    task = Task.from_code(SEEDS["2_Add_Broadcast"], name="add", source="seed")
    gen = TeacherGenerator("cpu", bug_rate=0.5, seed=1)
    prompt = build_prompt(task, "cpu")
    first = gen.generate(prompt, 2)
    assert first == TeacherGenerator("cpu", bug_rate=0.5, seed=1).generate(prompt, 2)
    bugs = [gen.injected_bug(r) for r in first]
    assert sorted(bool(b) for b in bugs) == [False, True]
    assert all(r.startswith("## Reasoning") and "```python" in r for r in first)
    buggy = first[[bool(b) for b in bugs].index(True)]
    msgs = prompt + [Message("assistant", buggy), Message("user", "Verifier feedback: output mismatch at [3, 7]")]
    fixed = gen.generate(msgs, 1)[0]
    assert "output mismatch at [3, 7]" in fixed and gen.injected_bug(fixed) == ""
    assert write_candidate(task.reference_code, "cpu", variant=0) in fixed or \
        write_candidate(task.reference_code, "cpu", variant=1) in fixed


def test_teacher_declines_what_it_cannot_lower():
    code = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        self.conv = nn.Conv2d(3, 8, 3)\n\n    def forward(self, x):\n"
            "        return self.conv(x)\n\ndef get_inputs():\n    return [torch.randn(2, 3, 16, 16)]\n\n"
            "def get_init_inputs():\n    return []\n")
    with pytest.raises(TeacherDeclined, match="convolution"):
        write_candidate(code, "cpu")
    from kernelmill.schema import Task
    from synth.generate.prompts import build_prompt

    out = TeacherGenerator("cpu").generate(build_prompt(Task.from_code(code, name="c", source="seed"), "cpu"), 2)
    assert len(out) == 2 and all(is_decline(r) and "```" not in r for r in out)
    assert len(FAMILY_TASKS) >= 10
