"""A mixed batch of distinct, honest, KernelBench-style CUDA candidates for the verifier benchmarks: 8 tasks of
levels 1-2 (elementwise ReLU, GELU and swish, a row-sum and a row-max reduction, a row softmax, a tiled matmul,
a fused level-2 Linear + bias + ReLU + scale chain), ``per_task`` candidates each. The candidates of a task differ
the way model answers do: kernel names, block sizes, loop shapes, and (every third one) the name and comment of
the host function, so that some share their binding code with another candidate and some do not.

    from bench.lib.mixed_batch import mixed_batch
    items = mixed_batch(per_task=12)   # [(Task, Candidate)], 96 candidates

Every CUDA source includes torch/extension.h, as model answers do."""

from __future__ import annotations

from kernelmill.schema import Candidate, Task


def _program(forward: str, inputs: str, *, args: str = "x", init: str = "", init_inputs: str = "[]",
             params: str = "") -> str:
    return f'''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self{params}):
        super().__init__()
        {init or "pass"}

    def forward(self, {args}):
        {forward}


def get_inputs():
    return {inputs}


def get_init_inputs():
    return {init_inputs}
'''


TASKS = {
    "relu": _program("return torch.relu(x)", "[torch.randn(2048, 4096)]"),
    "gelu": _program("return torch.nn.functional.gelu(x)", "[torch.randn(2048, 4096)]"),
    "swish": _program("return x * torch.sigmoid(x)", "[torch.randn(4096, 2048)]"),
    "rowsum": _program("return torch.sum(x, dim=1)", "[torch.randn(2048, 4096)]"),
    "rowmax": _program("return torch.amax(x, dim=1)", "[torch.randn(2048, 4096)]"),
    "softmax": _program("return torch.softmax(x, dim=1)", "[torch.randn(1024, 4096)]"),
    "matmul": _program("return torch.matmul(a, b)", "[torch.randn(1024, 768), torch.randn(768, 512)]", args="a, b"),
    "linear_relu_scale": _program("return torch.relu(self.fc(x)) * 0.5", "[torch.randn(256, 1024)]",
                                  init="self.fc = nn.Linear(i, o)", init_inputs="[1024, 512]", params=", i, o"),
}

# one body per task: ``{k}`` makes kernel names distinct, ``{T}`` is the block size
_ELEMENTWISE = r'''
__global__ void {name}_kernel_{k}(const float* __restrict__ x, float* __restrict__ y, long n) {{
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long stride = (long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {{ float v = x[i]; y[i] = {expr}; }}
}}

torch::Tensor {fn}(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    long n = x.numel();
    int blocks = (int)std::min<long>((n + {T} - 1) / {T}, 65535L);
    {name}_kernel_{k}<<<blocks, {T}>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}}
'''

_ROWREDUCE = r'''
__global__ void {name}_kernel_{k}(const float* __restrict__ x, float* __restrict__ y, int cols) {{
    __shared__ float buf[{T}];
    const float* row = x + (long)blockIdx.x * cols;
    float acc = {init};
    for (int c = threadIdx.x; c < cols; c += {T}) acc = {combine}(acc, row[c]);
    buf[threadIdx.x] = acc;
    __syncthreads();
    for (int s = {T} / 2; s > 0; s >>= 1) {{
        if (threadIdx.x < s) buf[threadIdx.x] = {combine}(buf[threadIdx.x], buf[threadIdx.x + s]);
        __syncthreads();
    }}
    if (threadIdx.x == 0) y[blockIdx.x] = buf[0];
}}

torch::Tensor {fn}(torch::Tensor x) {{
    int rows = x.size(0), cols = x.size(1);
    auto y = torch::empty({{rows}}, x.options());
    {name}_kernel_{k}<<<rows, {T}>>>(x.data_ptr<float>(), y.data_ptr<float>(), cols);
    return y;
}}
'''

_SOFTMAX = r'''
__global__ void softmax_kernel_{k}(const float* __restrict__ x, float* __restrict__ y, int cols) {{
    __shared__ float buf[{T}];
    const float* row = x + (long)blockIdx.x * cols;
    float* out = y + (long)blockIdx.x * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += {T}) m = fmaxf(m, row[c]);
    buf[threadIdx.x] = m;
    __syncthreads();
    for (int s = {T} / 2; s > 0; s >>= 1) {{
        if (threadIdx.x < s) buf[threadIdx.x] = fmaxf(buf[threadIdx.x], buf[threadIdx.x + s]);
        __syncthreads();
    }}
    m = buf[0];
    __syncthreads();
    float sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += {T}) sum += expf(row[c] - m);
    buf[threadIdx.x] = sum;
    __syncthreads();
    for (int s = {T} / 2; s > 0; s >>= 1) {{
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }}
    float inv = 1.0f / buf[0];
    for (int c = threadIdx.x; c < cols; c += {T}) out[c] = expf(row[c] - m) * inv;
}}

torch::Tensor {fn}(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    softmax_kernel_{k}<<<x.size(0), {T}>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.size(1));
    return y;
}}
'''

# C[M,N] = A[M,K] B[K,N] (matmul) or relu(A W^T + b) * 0.5 (linear: B is W[N,K]); tile TS x TS
_GEMM = r'''
#define TS_{k} {TS}
__global__ void {name}_kernel_{k}(const float* __restrict__ A, const float* __restrict__ B,
                                  const float* __restrict__ bias, float* __restrict__ C, int M, int N, int K) {{
    __shared__ float As[TS_{k}][TS_{k}];
    __shared__ float Bs[TS_{k}][TS_{k} + 1];
    int row = blockIdx.y * TS_{k} + threadIdx.y, col = blockIdx.x * TS_{k} + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < K; t += TS_{k}) {{
        int ka = t + threadIdx.x, kb = t + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[(long)row * K + ka] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (col < N && kb < K) ? {bload} : 0.0f;
        __syncthreads();
        for (int i = 0; i < TS_{k}; ++i) acc += As[threadIdx.y][i] * Bs[i][threadIdx.x];
        __syncthreads();
    }}
    if (row < M && col < N) C[(long)row * N + col] = {epilogue};
}}
'''

_MATMUL_HOST = r'''
torch::Tensor {fn}(torch::Tensor a, torch::Tensor b) {{
    int M = a.size(0), K = a.size(1), N = b.size(1);
    auto c = torch::empty({{M, N}}, a.options());
    dim3 block(TS_{k}, TS_{k}), grid((N + TS_{k} - 1) / TS_{k}, (M + TS_{k} - 1) / TS_{k});
    matmul_kernel_{k}<<<grid, block>>>(a.data_ptr<float>(), b.data_ptr<float>(), nullptr, c.data_ptr<float>(), M, N, K);
    return c;
}}
'''

_LINEAR_HOST = r'''
torch::Tensor {fn}(torch::Tensor x, torch::Tensor w, torch::Tensor bias) {{
    int M = x.size(0), K = x.size(1), N = w.size(0);
    auto c = torch::empty({{M, N}}, x.options());
    dim3 block(TS_{k}, TS_{k}), grid((N + TS_{k} - 1) / TS_{k}, (M + TS_{k} - 1) / TS_{k});
    linear_kernel_{k}<<<grid, block>>>(x.data_ptr<float>(), w.data_ptr<float>(), bias.data_ptr<float>(),
                                       c.data_ptr<float>(), M, N, K);
    return c;
}}
'''

_ELEMENTWISE_EXPR = {
    "relu": "v > 0.0f ? v : 0.0f",
    "gelu": "0.5f * v * (1.0f + erff(v * 0.70710678118654752f))",
    "swish": "v / (1.0f + expf(-v))",
}


def _source(task: str, k: int, fn: str) -> tuple[str, str, str]:
    """(CUDA source, C++ declaration, forward body) of candidate ``k`` of ``task``."""
    T = (128, 256, 512)[k % 3]
    head = "#include <torch/extension.h>\n#include <cuda_runtime.h>\n"
    if task in _ELEMENTWISE_EXPR:
        body = _ELEMENTWISE.format(name=task, k=k, T=T, fn=fn, expr=_ELEMENTWISE_EXPR[task])
        return head + body, f"torch::Tensor {fn}(torch::Tensor x);", f"return ext.{fn}(x.contiguous())"
    if task in ("rowsum", "rowmax"):
        init, combine = ("0.0f", "__fadd_rn") if task == "rowsum" else ("-INFINITY", "fmaxf")
        body = _ROWREDUCE.format(name=task, k=k, T=T, fn=fn, init=init, combine=combine)
        return head + body, f"torch::Tensor {fn}(torch::Tensor x);", f"return ext.{fn}(x.contiguous())"
    if task == "softmax":
        return (head + _SOFTMAX.format(k=k, T=T, fn=fn), f"torch::Tensor {fn}(torch::Tensor x);",
                f"return ext.{fn}(x.contiguous())")
    TS = (16, 32)[k % 2]
    if task == "matmul":
        body = _GEMM.format(name="matmul", k=k, TS=TS, bload="B[(long)kb * N + col]", epilogue="acc") + \
            _MATMUL_HOST.format(fn=fn, k=k)
        return (head + body, f"torch::Tensor {fn}(torch::Tensor a, torch::Tensor b);",
                f"return ext.{fn}(a.contiguous(), b.contiguous())")
    body = _GEMM.format(name="linear", k=k, TS=TS, bload="B[(long)col * K + kb]",
                        epilogue="fmaxf(acc + bias[col], 0.0f) * 0.5f") + _LINEAR_HOST.format(fn=fn, k=k)
    return (head + body, f"torch::Tensor {fn}(torch::Tensor x, torch::Tensor w, torch::Tensor bias);",
            f"return ext.{fn}(x.contiguous(), self.fc.weight, self.fc.bias)")


def candidate_code(task: str, k: int) -> str:
    """Candidate ``k`` of ``task``: a distinct source; the host function's name is shared by two of every
    three candidates of a task (so is, then, the binding code), the third has its own."""
    fn = f"{task}_forward" if k % 3 else f"{task}_cuda_{k}"
    cu, cpp, forward = _source(task, k, fn)
    args = "a, b" if task == "matmul" else "x"
    init = "self.fc = nn.Linear(i, o)" if task == "linear_relu_scale" else "pass"
    params = ", i, o" if task == "linear_relu_scale" else ""
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""{cu}"""
cpp_source = "{cpp}"
ext = load_inline(name="{task}_ext_{k}", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["{fn}"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self{params}):
        super().__init__()
        {init}

    def forward(self, {args}):
        {forward}
'''


def mixed_tasks() -> list[Task]:
    level = {"linear_relu_scale": 2}
    return [Task.from_code(code, name=f"mixed_{name}", source="seed", level=level.get(name, 1))
            for name, code in TASKS.items()]


def mixed_batch(per_task: int = 12, offset: int = 0) -> list[tuple[Task, Candidate]]:
    """``per_task`` distinct candidates of each task, interleaved task by task (as a generate stage writes
    them); ``offset`` shifts k so that a second batch is distinct from the first."""
    tasks = mixed_tasks()
    out = []
    for k in range(offset, offset + per_task):
        for name, task in zip(TASKS, tasks):
            out.append((task, Candidate(candidate_id=f"{name}-{k}", task_id=task.task_id, backend="cuda",
                                        generator="bench", code=candidate_code(name, k))))
    return out
