"""Builders for curation tests: real schema records written as real Parquet through kernelmill.store.

Candidate files are realistic load_inline programs; variants are made the way copies appear in
practice (consistent renames, reformatting, new comments) and the way distinct kernels differ
(another algorithm: grid-stride loop, shared-memory reduction)."""

from __future__ import annotations

from pathlib import Path

from kernelmill import store
from kernelmill.schema import (Candidate, Dialogue, Message, Origin, OpCount, Task, TensorSpec, TurnVerdict, Verdict,
                               content_hash)

REF_TEMPLATE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """{doc}"""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return {expr}


batch_size = {batch}
dim = {dim}


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''


def reference(doc: str, expr: str, batch: int = 256, dim: int = 4096) -> str:
    return REF_TEMPLATE.format(doc=doc, expr=expr, batch=batch, dim=dim)


def elementwise_candidate(body: str, *, names: dict | None = None, compact: bool = False, comment: str = "") -> str:
    """A ModelNew file with one elementwise CUDA kernel computing ``out[i] = body`` (body uses v).

    ``names`` renames every user identifier consistently; ``compact`` reformats the whole file."""
    n = {"kern": "act_kernel", "fn": "act_cuda", "inp": "x", "out": "out", "idx": "i", "size": "n",
         "src": "cuda_source", "mod": "ext", "v": "v"}
    n.update(names or {})
    b = body.replace("v", n["v"])
    if not compact:
        cuda = f'''
#include <torch/extension.h>
{comment}
__global__ void {n["kern"]}(const float* {n["inp"]}, float* {n["out"]}, int {n["size"]}) {{
    int {n["idx"]} = blockIdx.x * blockDim.x + threadIdx.x;
    if ({n["idx"]} < {n["size"]}) {{
        float {n["v"]} = {n["inp"]}[{n["idx"]}];
        {n["out"]}[{n["idx"]}] = {b};
    }}
}}

torch::Tensor {n["fn"]}(torch::Tensor {n["inp"]}) {{
    auto {n["out"]} = torch::empty_like({n["inp"]});
    int {n["size"]} = {n["inp"]}.numel();
    int threads = 256;
    {n["kern"]}<<<({n["size"]} + threads - 1) / threads, threads>>>({n["inp"]}.data_ptr<float>(), {n["out"]}.data_ptr<float>(), {n["size"]});
    return {n["out"]};
}}
'''
        return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

{n["src"]} = """{cuda}"""

{n["mod"]} = load_inline(
    name="{n["mod"]}_ext",
    cpp_sources="torch::Tensor {n["fn"]}(torch::Tensor {n["inp"]});",
    cuda_sources={n["src"]},
    functions=["{n["fn"]}"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, {n["inp"]}):
        return {n["mod"]}.{n["fn"]}({n["inp"]})
'''
    cuda = (f'#include <torch/extension.h>\n{comment}\n__global__ void {n["kern"]}(const float *{n["inp"]},float *{n["out"]},int {n["size"]})'
            f'{{int {n["idx"]}=blockIdx.x*blockDim.x+threadIdx.x;if({n["idx"]}<{n["size"]}){{float {n["v"]}={n["inp"]}[{n["idx"]}];'
            f'{n["out"]}[{n["idx"]}]={b};}}}}\n'
            f'torch::Tensor {n["fn"]}(torch::Tensor {n["inp"]}){{auto {n["out"]}=torch::empty_like({n["inp"]});'
            f'int {n["size"]}={n["inp"]}.numel();int threads=512;'
            f'{n["kern"]}<<<({n["size"]}+threads-1)/threads,threads>>>({n["inp"]}.data_ptr<float>(),{n["out"]}.data_ptr<float>(),{n["size"]});'
            f'return {n["out"]};}}\n')
    return (f'import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n'
            f'{n["src"]} = {cuda!r}\n'
            f'{n["mod"]} = load_inline(name="{n["mod"]}_ext", cpp_sources="torch::Tensor {n["fn"]}(torch::Tensor {n["inp"]});", '
            f'cuda_sources={n["src"]}, functions=["{n["fn"]}"])\n'
            f'class ModelNew(nn.Module):\n  def __init__(self):\n    super().__init__()\n'
            f'  def forward(self, {n["inp"]}):\n    # compact variant\n    return {n["mod"]}.{n["fn"]}({n["inp"]})\n')


def grid_stride_candidate(body: str) -> str:
    """A distinct implementation: float4-vectorised grid-stride loop with a scalar tail."""
    b4 = lambda c: body.replace("v", f"q.{c}")  # noqa: E731
    cuda = f'''
#include <torch/extension.h>

__global__ void act_vec4(const float4* __restrict__ src, float4* __restrict__ dst, int n4) {{
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < n4; k += blockDim.x * gridDim.x) {{
        float4 q = src[k];
        float4 r;
        r.x = {b4("x")};
        r.y = {b4("y")};
        r.z = {b4("z")};
        r.w = {b4("w")};
        dst[k] = r;
    }}
}}

__global__ void act_tail(const float* src, float* dst, int start, int n) {{
    int k = start + blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) {{ float v = src[k]; dst[k] = {body}; }}
}}

torch::Tensor act_forward(torch::Tensor input) {{
    TORCH_CHECK(input.is_contiguous(), "input must be contiguous");
    auto result = torch::empty_like(input);
    int n = input.numel();
    int n4 = n / 4;
    int blocks = std::min((n4 + 255) / 256, 1024);
    if (n4 > 0) act_vec4<<<blocks, 256>>>(reinterpret_cast<const float4*>(input.data_ptr<float>()),
                                          reinterpret_cast<float4*>(result.data_ptr<float>()), n4);
    int rest = n - n4 * 4;
    if (rest > 0) act_tail<<<(rest + 127) / 128, 128>>>(input.data_ptr<float>(), result.data_ptr<float>(), n4 * 4, n);
    return result;
}}
'''
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_src = """{cuda}"""
_mod = load_inline(name="act_vec", cpp_sources="torch::Tensor act_forward(torch::Tensor input);",
                   cuda_sources=_src, functions=["act_forward"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        return _mod.act_forward(x)
'''


RELU = "fmaxf(v, 0.0f)"
SIGMOID = "1.0f / (1.0f + expf(-v))"
TANH_SCALE = "tanhf(v * 0.5f) * 2.0f + 1.0f"
RENAMES = {"kern": "relu_fwd_kernel", "fn": "relu_forward", "inp": "input_tensor", "out": "result", "idx": "gid",
           "size": "numel", "src": "kernel_code", "mod": "relu_module", "v": "val"}


def make_task(name: str, expr: str, *, level: int = 1, source: str = "seed", batch: int = 256, license: str = "") -> Task:
    ref = reference(name, expr, batch=batch)
    return Task.from_code(ref, name=name, source=source, level=level, origin=Origin(license=license),
                          input_specs=[TensorSpec("x", [batch, 4096], "float32")],
                          output_specs=[TensorSpec("out", [batch, 4096], "float32")],
                          op_histogram=[OpCount(expr.split("(")[0], 1)], flops=batch * 4096)


class RunBuilder:
    """Collects records of a fake-but-real run and writes them with kernelmill.store."""

    def __init__(self):
        self.tasks, self.candidates, self.verdicts, self.dialogues = [], [], [], []

    def task(self, t: Task) -> Task:
        self.tasks.append(t)
        return t

    def candidate(self, task: Task, code: str, *, correct: bool, speedup: float | None = 1.5, parent: str | None = None,
                  backend: str = "cuda", turn: int = 0) -> Candidate:
        cid = Candidate.make_id(task.task_id, backend, code, parent)
        c = Candidate(candidate_id=cid, task_id=task.task_id, backend=backend, generator="teacher", code=code, turn=turn,
                      parent_id=parent, prompt=f"Write a CUDA kernel for {task.name}.")
        self.candidates.append(c)
        reward = (1.0 + (speedup or 0)) if correct else 0.2
        self.verdicts.append(Verdict(candidate_id=cid, task_id=task.task_id, backend=backend,
                                     stage_reached="timing" if correct else "correctness",
                                     status="pass" if correct else "wrong", compiled=True, correct=correct,
                                     speedup_eager=speedup if correct else None, reward=reward,
                                     feedback="" if correct else "output mismatch at index 7: max_abs_err 0.5"))
        return c

    def dialogue(self, task: Task, turns: list[Candidate], backend: str = "cuda") -> Dialogue:
        vs = {v.candidate_id: v for v in self.verdicts}
        msgs = [Message("user", f"Write a CUDA kernel for {task.name}.")]
        tvs = []
        for c in turns:
            v = vs[c.candidate_id]
            msgs.append(Message("assistant", f"```python\n{c.code}\n```"))
            msgs.append(Message("user", v.feedback or "Correct. Speedup recorded."))
            tvs.append(TurnVerdict(c.candidate_id, v.stage_reached, v.status, v.correct, v.reward, v.speedup_eager))
        d = Dialogue(dialogue_id="d" + content_hash(*[c.candidate_id for c in turns]), task_id=task.task_id,
                     backend=backend, generator="teacher", messages=msgs, turn_verdicts=tvs,
                     first_turn_reward=tvs[0].reward, final_reward=tvs[-1].reward, num_turns=len(tvs),
                     solved=tvs[-1].correct)
        for c in turns:  # as the generate and repair stages store them: every turn names its dialogue
            c.dialogue_id = d.dialogue_id
        self.dialogues.append(d)
        return d

    def write(self, run_dir: Path) -> Path:
        store.write_records(run_dir, "tasks", self.tasks)
        store.write_records(run_dir, "candidates", self.candidates)
        store.write_records(run_dir, "verdicts", self.verdicts)
        store.write_records(run_dir, "dialogues", self.dialogues)
        return run_dir


def standard_run(run_dir: Path) -> dict:
    """A run with known answers:

    relu (level 1): 4 correct first-turn samples = original, renamed copy, reformatted copy,
        distinct grid-stride kernel; 1 wrong sample repaired in turn 2 (its fix is a copy too).
        pass rate 4/5. rft keeps 2 (original + grid-stride), drops 3 near-copies.
    sigmoid (level 1, github): 1 correct, 1 wrong unrepaired. pass rate 1/2.
    tanh (level 2, nnsmith): 2 correct (all pass): left out of rl unless keep_trivial.
    gelu-ish (level 2): 2 wrong, nobody solves: left out of rl unless keep_trivial; no sft / rft rows.
    """
    b = RunBuilder()
    relu = b.task(make_task("ReLU", "torch.relu(x)", level=1, source="seed"))
    sig = b.task(make_task("Sigmoid", "torch.sigmoid(x)", level=1, source="github", license="mit"))
    tanh = b.task(make_task("ScaledTanh", "torch.tanh(x * 0.5) * 2 + 1", level=2, source="nnsmith"))
    hard = b.task(make_task("Erf", "torch.erf(x) * x", level=2, source="nnsmith"))

    r_orig = b.candidate(relu, elementwise_candidate(RELU), correct=True, speedup=1.8)
    r_ren = b.candidate(relu, elementwise_candidate(RELU, names=RENAMES), correct=True, speedup=1.7)
    r_fmt = b.candidate(relu, elementwise_candidate(RELU, compact=True, comment="// a comment about relu"),
                        correct=True, speedup=1.6)
    r_grid = b.candidate(relu, grid_stride_candidate(RELU), correct=True, speedup=2.5)
    r_bad = b.candidate(relu, elementwise_candidate("fmaxf(v, 1.0f)"), correct=False)
    r_fix = b.candidate(relu, elementwise_candidate(RELU, names={"kern": "relu_fixed"}), correct=True, speedup=1.1,
                        parent=r_bad.candidate_id, turn=1)
    s_ok = b.candidate(sig, elementwise_candidate(SIGMOID), correct=True, speedup=0.9)
    s_bad = b.candidate(sig, elementwise_candidate("1.0f / (1.0f - expf(v))"), correct=False)
    s_bad2 = b.candidate(sig, elementwise_candidate("1.0f / (1.0f - expf(v * 2.0f))", names={"kern": "k2"}),
                         correct=False, parent=s_bad.candidate_id, turn=1)
    t1 = b.candidate(tanh, elementwise_candidate(TANH_SCALE), correct=True, speedup=1.3)
    t2 = b.candidate(tanh, grid_stride_candidate(TANH_SCALE), correct=True, speedup=1.9)
    h1 = b.candidate(hard, elementwise_candidate("erff(v) * v + 1.0f"), correct=False)
    h2 = b.candidate(hard, grid_stride_candidate("erff(v) + v"), correct=False)

    dialogues = {
        "relu_orig": b.dialogue(relu, [r_orig]),
        "relu_ren": b.dialogue(relu, [r_ren]),  # a near-copy trajectory of relu_orig
        "relu_grid": b.dialogue(relu, [r_grid]),
        "relu_repair": b.dialogue(relu, [r_bad, r_fix]),
        "sig_ok": b.dialogue(sig, [s_ok]),
        "sig_fail": b.dialogue(sig, [s_bad, s_bad2]),
        "tanh": b.dialogue(tanh, [t1]),
        "hard": b.dialogue(hard, [h1]),
    }
    b.write(run_dir)
    return {"builder": b, "tasks": {"relu": relu, "sigmoid": sig, "tanh": tanh, "hard": hard},
            "relu": {"orig": r_orig, "ren": r_ren, "fmt": r_fmt, "grid": r_grid, "bad": r_bad, "fix": r_fix},
            "dialogues": dialogues}


def softmax_candidate() -> str:
    """A structurally different kernel: one block per row, shared-memory max and sum reductions."""
    cuda = r'''
#include <torch/extension.h>

__global__ void row_softmax(const float* in, float* out, int cols) {
    extern __shared__ float buf[];
    const float* row = in + blockIdx.x * cols;
    float* dst = out + blockIdx.x * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    buf[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] = fmaxf(buf[threadIdx.x], buf[threadIdx.x + s]);
        __syncthreads();
    }
    m = buf[0];
    __syncthreads();
    float total = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) total += expf(row[c] - m);
    buf[threadIdx.x] = total;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    total = buf[0];
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = expf(row[c] - m) / total;
}

torch::Tensor softmax_rows(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int rows = x.size(0), cols = x.size(1);
    row_softmax<<<rows, 256, 256 * sizeof(float)>>>(x.data_ptr<float>(), y.data_ptr<float>(), cols);
    return y;
}
'''
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

softmax_mod = load_inline(name="softmax_rows", cpp_sources="torch::Tensor softmax_rows(torch::Tensor x);",
                          cuda_sources="""{cuda}""", functions=["softmax_rows"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return softmax_mod.softmax_rows(x.contiguous())
'''
