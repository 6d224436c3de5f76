"""The procedural task families and the compact teacher: valid, deterministic, distinct programs;
answers that are a regular function of the task; cuda text the verifier builds on its bare path;
cpu twins that pass the real cpu verifier."""

import ast
import re
import shutil
import subprocess

import pytest
import torch

from synth.teacher.compact import answer, cpu_answer, cuda_answer
from synth.teacher.task_families import KINDS, OPS, FamilyTask, Op, degenerate, fmt_const, generate_tasks, run_task, task_code


@pytest.fixture(scope="module")
def tasks() -> list[FamilyTask]:
    return generate_tasks(300, seed=7, max_numel=1 << 16)


def test_generator_is_deterministic_distinct_and_covers_every_family(tasks):
    again = generate_tasks(300, seed=7, max_numel=1 << 16)
    assert [task_code(t) for t in tasks] == [task_code(t) for t in again]
    assert len({task_code(t) for t in tasks}) == len(tasks)
    assert task_code(generate_tasks(1, seed=8, max_numel=1 << 16)[0]) != task_code(tasks[0])
    assert {t.kind for t in tasks} == set(KINDS)
    used = {o.name for t in tasks for o in t.ops}
    assert used == set(OPS)
    assert all(1 <= len(t.ops) <= 4 for t in tasks if t.kind == "ew")
    assert all(len(t.shape) == 2 and len(t.ops) <= 2 for t in tasks if t.kind != "ew")
    assert all(any(OPS[o.name][2] for o in t.ops) for t in tasks if t.two_inputs)  # y is used
    assert sum(o.name == "exp" for t in tasks for o in t.ops if True) > 0
    assert all(sum(o.name == "exp" for o in t.ops) <= 1 for t in tasks)
    with pytest.raises(ValueError):
        generate_tasks(-1)


def test_every_program_is_a_valid_float32_task_that_imports_only_torch(tasks):
    for t in tasks:
        code = task_code(t)
        tree = ast.parse(code)
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert imported == {"torch"} and not any(isinstance(n, ast.ImportFrom) for n in ast.walk(tree))
        out, inputs = run_task(code)
        assert all(x.dtype == torch.float32 and x.shape == t.shape for x in inputs)
        assert out.dtype == torch.float32 and torch.isfinite(out).all()
        assert out.shape == (t.shape if t.kind in ("ew", "softmax") else t.shape[:1])
        assert degenerate(code) == ""


def test_degenerate_programs_are_detected_and_constants_are_literals():
    dead = FamilyTask("ew", (Op("relu"), Op("neg"), Op("relu")), False, (64, 64))  # relu(-relu(x)) == 0
    assert degenerate(task_code(dead)) == "output does not depend on the inputs"
    assert [fmt_const(c) for c in (2.0, 0.375, 1.5, -0.3)] == ["2.0", "0.38", "1.5", "-0.3"]


def test_answers_are_one_line_per_op_with_constants_copied_and_shape_free(tasks):
    for t in tasks[:60]:
        for backend in ("cuda", "cpu"):
            a = answer(t, backend)
            for o in t.ops:
                assert o.c_line() in a
                for c in o.consts:
                    assert f"{c}f" in a
            assert not any(str(s) in re.findall(r"\d+", a) for s in t.shape if s > 300)  # sizes are runtime
            assert len(cuda_answer(t).splitlines()) <= 70
        # the same op chain at another shape gets the same answer
        other = FamilyTask(t.kind, t.ops, t.two_inputs, tuple(s + 1 for s in t.shape))
        assert cuda_answer(other) == cuda_answer(t)
    with pytest.raises(ValueError):
        answer(tasks[0], "musa")


def test_cuda_source_names_nothing_from_torch_so_the_verifier_builds_it_bare(tasks):
    from verifier.build import build_variants, canonical_spec
    from verifier.static import scan

    for t in tasks[:40]:
        rep = scan(cuda_answer(t), "cuda")
        assert not rep.findings, rep.findings
        (ext,) = rep.extensions
        assert ext.resolved
        variants = build_variants(canonical_spec(ext.args))
        assert [v[0] for v in variants] == ["bare", "full"]
        cu = "".join(ext.args["cuda_sources"])
        assert not re.search(r"torch|ATen|c10|\bat::|TORCH_|AT_|C10_", cu)
        assert "getCurrentCUDAStream" in "".join(ext.args["cpp_sources"])


CUDA_SHIM = """
#include <cmath>
struct dim3_ { long x; };
static dim3_ blockIdx, blockDim, threadIdx;
typedef void* cudaStream_t;
#define __global__
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_cuda_sources_parse_as_cuda_cpp(tasks, tmp_path):
    """No nvcc here: every kernel of a sample goes through g++ -fsyntax-only with a shim for the CUDA
    built-ins and the <<<>>> launch rewritten as a call; catches typos and undeclared names."""
    from verifier.static import scan

    src = [CUDA_SHIM]
    for k, t in enumerate(tasks[:80]):
        cu = "".join(scan(cuda_answer(t), "cuda").extensions[0].args["cuda_sources"])
        cu = re.sub(r"fused<<<[^>]*>>>", "fused", cu)
        src.append(f"namespace t{k} {{\n{cu}\n}}\n")
    f = tmp_path / "all.cpp"
    f.write_text("".join(src))
    r = subprocess.run(["g++", "-fsyntax-only", "-std=c++17", str(f)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[:3000]


def test_cpu_twins_pass_the_real_cpu_verifier(tasks):
    """One elementwise task with two inputs and one row softmax, through verifier.api on cpu."""
    from train.rollout import verifier_reward_fn

    pick = [next(t for t in tasks if t.kind == "ew" and t.two_inputs and len(t.ops) >= 3),
            next(t for t in tasks if t.kind == "softmax" and t.ops)]
    fn = verifier_reward_fn("cpu", {"trials": 5, "timing_trials": 0, "time_torch_compile": False,
                                    "compile_workers": 2})
    scores = fn([({"reference_code": task_code(t), "task_id": t.signature}, f"```python\n{cpu_answer(t)}```")
                 for t in pick])
    assert [s.correct for s in scores] == [True, True], [s.feedback for s in scores]
    # and a one-character change in an op line is caught (the check can fail)
    t = pick[0]
    wrong = cpu_answer(t).replace(t.ops[-1].c_line(), "v = v + 0.123f;")
    bad = fn([({"reference_code": task_code(t), "task_id": t.signature}, f"```python\n{wrong}```")])
    assert not bad[0].correct
