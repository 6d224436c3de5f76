"""The procedural task families and the compact teacher: valid, deterministic, distinct programs in
four tiers; answers that are a regular function of the task; cuda text the verifier builds on its
bare path; cpu twins that compute what torch computes (one build of many) and pass the real cpu
verifier."""

import ast
import dataclasses
import re
import shutil
import subprocess

import pytest
import torch

from bench.lib.task_families import (
    HARD_KINDS,
    KINDS,
    OPS,
    REDUCING,
    ROW_OPS,
    FamilyTask,
    Op,
    degenerate,
    fmt_const,
    generate_mix,
    generate_tasks,
    parse_shares,
    run_task,
    task_code,
)
from bench.lib.teacher_compact import answer, cpu_answer, cuda_answer


@pytest.fixture(scope="module")
def tasks() -> list[FamilyTask]:
    return generate_tasks(300, seed=7, max_numel=1 << 16)


@pytest.fixture(scope="module")
def hard() -> list[FamilyTask]:
    """Tiers 2-4, 60 programs each."""
    return generate_mix(180, seed=7, shares={2: 1, 3: 1, 4: 1}, max_numel=1 << 16)


def spread(ts: list[FamilyTask], n: int) -> list[FamilyTask]:
    """Up to n tasks, round-robin over (tier, kind, y_row, has post) so every structure is represented."""
    groups: dict = {}
    for t in ts:
        groups.setdefault((t.tier, t.kind, t.y_row, bool(t.post)), []).append(t)
    out: list[FamilyTask] = []
    while len(out) < n and any(groups.values()):
        for g in sorted(groups):
            if groups[g] and len(out) < n:
                out.append(groups[g].pop(0))
    return out


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


def test_answers_are_one_line_per_op_with_constants_copied_and_shape_free(tasks, hard):
    for t in tasks[:60] + spread(hard, 60):
        for backend in ("cuda", "cpu"):
            a = answer(t, backend)
            for o in t.ops + t.post:
                assert o.c_line() in a
                for c in o.consts:
                    assert f"{c}f" in a
            assert not any(str(s) in re.findall(r"\d+", a) for s in t.shape if s > 300)  # sizes are runtime
            assert len(cuda_answer(t).splitlines()) <= 70
        # the same op chain at another shape gets the same answer
        other = dataclasses.replace(t, shape=tuple(s + 1 for s in t.shape))
        assert cuda_answer(other) == cuda_answer(t)
    with pytest.raises(ValueError):
        answer(tasks[0], "musa")


def test_cuda_source_names_nothing_from_torch_so_the_verifier_builds_it_bare(tasks, hard):
    from verifier.build.variants import build_variants
    from verifier.common.spec import canonical_spec
    from verifier.front.static import scan

    for t in tasks[:40] + spread(hard, 40):
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
def test_cuda_sources_parse_as_cuda_cpp(tasks, hard, tmp_path):
    """No nvcc here: every kernel of a sample goes through g++ -fsyntax-only with a shim for the CUDA
    built-ins and the <<<>>> launch rewritten as a call; catches typos and undeclared names."""
    from verifier.front.static import scan

    src = [CUDA_SHIM]
    for k, t in enumerate(tasks[:80] + spread(hard, 80)):
        cu = "".join(scan(cuda_answer(t), "cuda").extensions[0].args["cuda_sources"])
        cu = re.sub(r"fused<<<[^>]*>>>", "fused", cu)
        src.append(f"namespace t{k} {{\n{cu}\n}}\n")
    f = tmp_path / "all.cpp"
    f.write_text("".join(src))
    r = subprocess.run(["g++", "-fsyntax-only", "-std=c++17", str(f)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[:3000]


def test_cpu_twins_pass_the_real_cpu_verifier(tasks, hard):
    """One elementwise task with two inputs and one tier-4 row normalisation that reads a broadcast row vector
    before and after it (a row reduction inside), through verifier.engine on cpu."""
    from train.rollout import verifier_reward_fn

    pick = [next(t for t in tasks if t.kind == "ew" and t.two_inputs and len(t.ops) >= 3),
            next(t for t in hard if t.tier == 4 and t.y_row and any(OPS[o.name][2] for o in t.post))]
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


# ---------------------------------------------------------------------------- tiers 2-4


def test_tiers_keep_tier_one_and_add_longer_chains_broadcasts_post_chains_and_normalisations(tasks, hard):
    # tier 1 inside a mix is the tier-1 generator's sequence: a corpus made before tiers keeps its programs
    mix = generate_mix(400, seed=7, shares={1: 0.5, 2: 0.2, 3: 0.2, 4: 0.1}, max_numel=1 << 16)
    assert [task_code(t) for t in mix if t.tier == 1] == [task_code(t) for t in generate_tasks(200, 7, max_numel=1 << 16)]
    assert [sum(t.tier == k for t in mix) for k in (1, 2, 3, 4)] == [200, 80, 80, 40]
    assert [task_code(t) for t in mix] == [task_code(t) for t in generate_mix(400, 7, {1: .5, 2: .2, 3: .2, 4: .1},
                                                                            max_numel=1 << 16)]
    assert len({task_code(t) for t in mix}) == len(mix)
    by = {k: [t for t in hard if t.tier == k] for k in (2, 3, 4)}
    assert all(5 <= len(t.ops) <= 8 for t in by[2] if t.kind == "ew")
    assert all(3 <= len(t.ops) <= 4 and not t.post for t in by[2] if t.kind != "ew")
    assert {t.kind for t in by[3]} == set(ROW_OPS) and all(1 <= len(t.post) <= 3 for t in by[3])
    assert {t.kind for t in by[4]} == set(HARD_KINDS) and any(t.post for t in by[4])
    assert any(t.y_row for t in by[2]) and any(t.y_row for t in by[4])
    # after a reduction the post chain is per row: it never reads y; after a normalisation it may (a weight)
    assert not any(OPS[o.name][2] for t in hard if t.kind in REDUCING for o in t.post)
    assert any(OPS[o.name][2] for t in by[4] if t.kind not in REDUCING for o in t.post)
    assert all(sum(o.name == "exp" for o in t.ops + t.post) <= 1 for t in hard)
    t = next(t for t in by[4] if t.post and t.y_row)
    assert t.signature == f"{t.kind}:{','.join(o.name for o in t.ops)}|{','.join(o.name for o in t.post)}+row"
    assert t.difficulty == len(t.ops) + len(t.post) + 2 + 1
    assert parse_shares("1=0.4, 3=0.6") == {1: 0.4, 3: 0.6}
    for bad in ("5=1", "1=-1", "1=0"):
        with pytest.raises(ValueError):
            parse_shares(bad)


def test_every_tier_program_is_valid_and_not_near_constant(hard):
    for t in hard:
        code = task_code(t)
        out, inputs = run_task(code)
        assert inputs[0].shape == t.shape and torch.isfinite(out).all()
        if t.two_inputs:
            assert inputs[1].shape == ((t.shape[-1],) if t.y_row else t.shape)
        assert out.shape == (t.shape[:1] if t.kind in REDUCING else t.shape)
        assert degenerate(code, atol=1e-3) == ""
    # a saturated program (tanh of a row sum is +-1 almost everywhere) is what the tolerance catches
    sat = FamilyTask("sum", (Op("sigmoid"),), False, (64, 16), post=(Op("neg"), Op("tanh")), tier=3)
    assert degenerate(task_code(sat)) == "" and degenerate(task_code(sat), atol=1e-3) == "output barely depends on the inputs"


def test_cpu_twins_of_every_tier_structure_compute_what_torch_computes(hard):
    """One C++ extension holding the cpu answers of every (tier, kind, broadcast, post) structure, built
    once (the verifier would build each answer apart: ~40 s each here); outputs against torch on two
    input draws at the verifier's fp32 tolerance."""
    from torch.utils.cpp_extension import load_inline

    pick = spread(hard, 36)
    srcs = []
    for k, t in enumerate(pick):
        cpp = re.search(r'cpp_src = r"""\n(.*?)"""', cpu_answer(t), re.S).group(1)
        srcs.append(cpp.replace("#include <cmath>\n", "").replace("torch::Tensor run(", f"torch::Tensor run_{k}("))
    ext = load_inline(name=f"tiers_{len(pick)}", cpp_sources="#include <cmath>\n" + "\n".join(srcs),
                      functions=[f"run_{k}" for k in range(len(pick))], extra_cflags=["-O1"])
    for k, t in enumerate(pick):
        for seed in (0, 5):
            ref, inputs = run_task(task_code(t), seed)
            got = getattr(ext, f"run_{k}")(*inputs)
            assert got.shape == ref.shape and torch.allclose(got, ref, atol=1e-4, rtol=1e-4), (t.signature, t.shape)
