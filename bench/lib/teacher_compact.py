"""A compact teacher for the task families of bench/lib/task_families.py: a short, correct ModelNew file
that is a regular function of the task, so a small model can learn the mapping.

The answer is one template per family kind with three variable parts: whether a second input ``y``
is passed (and whether it is a row vector broadcast over the rows: ``y[i % m]``, ``y[c]``), one C
expression line per op of the chains before and after the row op (``OPS``: ``x = torch.relu(x)`` ->
``v = fmaxf(v, 0.0f);``, constants copied), and the kind's loop (elementwise, row reduction, row
softmax, logsumexp, row normalisations). Row kinds that keep the shape write the chain's values to
``out`` in a first pass, then finish each row in place. Sizes are runtime arguments, so the answer
does not depend on the task's shape.

cuda: the CUDA source names nothing from torch (no torch/at/c10 namespaces, TORCH_/AT_/C10_ macros
or torch includes): ``__global__ void fused`` and a plain ``launch`` taking raw pointers, sizes and a
``cudaStream_t``. The torch side (checks, allocation, the current stream, the call) lives in
``cpp_sources``. The verifier builds such a source in its fast "bare" variant (verifier/build/pool.py).
cpu: the twin, ``cpp_sources`` only: the same expression lines inside a plain loop.

Guarantees: the output is deterministic and, for every task of task_families, correct within
float32 tolerance (tests/test_task_families.py checks samples through the real cpu verifier and
the cuda text with a C++ syntax check; the GPU benchmark checks cuda answers on a GPU). Row kernels
use one thread per row (simple, not fast).
"""

from __future__ import annotations

from bench.lib.task_families import OPS, REDUCING, FamilyTask

HEADER = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"


def _names(t: FamilyTask) -> tuple[str, str, str, str]:
    """(python args, C pointer params, C pointer args, torch tensor params) for one or two inputs."""
    if t.two_inputs:
        return ("x, y", "const float* x, const float* y", "x, y",
                "torch::Tensor x, torch::Tensor y")
    return "x", "const float* x", "x", "torch::Tensor x"


def _body(t: FamilyTask, ind: str, idx: str, yidx: str = "") -> str:
    """Load x at ``idx`` (and y at ``yidx``, default ``idx``) into v (and w), then one line per op."""
    lines = [f"float v = x[{idx}];"] + ([f"float w = y[{yidx or idx}];"] if t.two_inputs else [])
    lines += [o.c_line() for o in t.ops]
    return "".join(f"{ind}{ln}\n" for ln in lines)


def _finish(t: FamilyTask, ind: str, value: str, dest: str, yidx: str = "") -> str:
    """``dest = value`` through the post chain: ``float v = value;`` (w loaded when a post op uses y),
    one line per post op, ``dest = v;``. Without a post chain: ``dest = value;``."""
    if not t.post:
        return f"{ind}{dest} = {value};\n"
    lines = [f"float v = {value};"]
    if t.two_inputs and any(OPS[o.name][2] for o in t.post):
        lines.append(f"float w = y[{yidx}];")
    lines += [o.c_line() for o in t.post] + [f"{dest} = v;"]
    return "".join(f"{ind}{ln}\n" for ln in lines)


def _row_loop(t: FamilyTask, ind: str) -> str:
    """The per-row computation of a row kind, for row ``r`` of ``cols`` columns (C, cuda and cpu)."""
    yc = "c" if t.y_row else "i"
    head = f"{ind}for (long c = 0; c < cols; c++) {{\n{ind}  long i = r * cols + c;\n"
    loop = head + _body(t, ind + "  ", "i", yc)
    # the last pass of a shape-keeping kind: each value of the row, finished through the post chain
    last = lambda value: head + _finish(t, ind + "  ", value, "out[i]", yc) + f"{ind}}}\n"  # noqa: E731
    if t.kind in ("sum", "mean"):
        fin = "(float)acc" if t.kind == "sum" else "(float)(acc / cols)"
        return f"{ind}double acc = 0.0;\n{loop}{ind}  acc += v;\n{ind}}}\n" + _finish(t, ind, fin, "out[r]")
    if t.kind == "amax":
        return f"{ind}float acc = -3.4e38f;\n{loop}{ind}  acc = fmaxf(acc, v);\n{ind}}}\n" + _finish(t, ind, "acc", "out[r]")
    if t.kind == "logsumexp":  # max, then the sum of exp(v - max) with the chain computed again
        return (f"{ind}float m = -3.4e38f;\n{loop}{ind}  m = fmaxf(m, v);\n{ind}}}\n"
                f"{ind}double s = 0.0;\n{loop}{ind}  s += expf(v - m);\n{ind}}}\n"
                + _finish(t, ind, "m + logf((float)s)", "out[r]"))
    if t.kind == "softmax":  # values, then exp(v - max) and their sum, then the scale
        pre = (f"{ind}float m = -3.4e38f;\n{loop}{ind}  out[i] = v;\n{ind}  m = fmaxf(m, v);\n{ind}}}\n"
               f"{ind}double s = 0.0;\n"
               f"{ind}for (long i = r * cols; i < (r + 1) * cols; i++) {{\n"
               f"{ind}  out[i] = expf(out[i] - m);\n{ind}  s += out[i];\n{ind}}}\n")
        if not t.post:
            return pre + f"{ind}for (long i = r * cols; i < (r + 1) * cols; i++) out[i] = (float)(out[i] / s);\n"
        return pre + last("(float)(out[i] / s)")
    mean = f"{ind}double acc = 0.0;\n{loop}{ind}  out[i] = v;\n{ind}  acc += v;\n{ind}}}\n"
    if t.kind == "center":
        return mean + f"{ind}float mu = (float)(acc / cols);\n" + last("out[i] - mu")
    if t.kind == "rmsnorm":
        return (f"{ind}double acc = 0.0;\n{loop}{ind}  out[i] = v;\n{ind}  acc += (double)v * v;\n{ind}}}\n"
                f"{ind}float rs = (float)(1.0 / sqrt(acc / cols + 1e-5));\n" + last("out[i] * rs"))
    if t.kind == "layernorm":  # center, then scale by the rms of the centred row
        return (mean + f"{ind}float mu = (float)(acc / cols);\n{ind}double sq = 0.0;\n"
                f"{ind}for (long i = r * cols; i < (r + 1) * cols; i++) {{\n"
                f"{ind}  out[i] = out[i] - mu;\n{ind}  sq += (double)out[i] * out[i];\n{ind}}}\n"
                f"{ind}float rs = (float)(1.0 / sqrt(sq / cols + 1e-5));\n" + last("out[i] * rs"))
    raise ValueError(f"teacher_compact: unknown kind {t.kind!r}")


def _alloc(t: FamilyTask) -> str:
    return "torch::empty({x.size(0)}, x.options())" if t.kind in REDUCING else "torch::empty_like(x)"


def _check(t: FamilyTask, device: str) -> str:
    what = "a float32 cuda tensor" if device == "cuda" else "a float32 tensor"
    cond = "x.is_cuda() && " if device == "cuda" else ""
    if t.kind != "ew":
        cond += "x.dim() == 2 && "
        what = what.replace("a float32", "a 2-D float32")
    return f'  TORCH_CHECK({cond}x.scalar_type() == torch::kFloat32, "x must be {what}");\n'


def _module(t: FamilyTask, sources: str, load: str) -> str:
    args, _p, _a, _tp = _names(t)
    contig = ", ".join(f"{a}.contiguous()" for a in args.split(", "))
    return (f"{HEADER}{sources}\next = load_inline({load}functions=[\"run\"])\n\n\n"
            "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
            f"    def forward(self, {args}):\n        return ext.run({contig})\n")


def cuda_answer(t: FamilyTask) -> str:
    """The cuda ModelNew file for a task (bare CUDA source + torch wrapper in cpp_sources)."""
    _args, params, ptrs, tparams = _names(t)
    data = ", ".join(f"{a}.data_ptr<float>()" for a in ptrs.split(", "))
    if t.kind == "ew" and t.y_row:  # y is a row vector of m values, broadcast over x
        sizes, size_args, count, size_vals = "long n, long m", "n, m", "n", "x.numel(), y.numel()"
        kernel = ("  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n"
                  + _body(t, "  ", "i", "i % m") + "  out[i] = v;\n")
    elif t.kind == "ew":
        sizes, size_args, count, size_vals = "long n", "n", "n", "x.numel()"
        kernel = ("  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n"
                  + _body(t, "  ", "i") + "  out[i] = v;\n")
    else:
        sizes, size_args, count, size_vals = "long rows, long cols", "rows, cols", "rows", "x.size(0), x.size(1)"
        kernel = "  long r = (long)blockIdx.x * blockDim.x + threadIdx.x;\n  if (r >= rows) return;\n" + _row_loop(t, "  ")
    cuda = (f"__global__ void fused({params}, float* out, {sizes}) {{\n{kernel}}}\n\n"
            f"void launch({params}, float* out, {sizes}, cudaStream_t s) {{\n"
            f"  fused<<<(unsigned)(({count} + 255) / 256), 256, 0, s>>>({ptrs}, out, {size_args});\n}}\n")
    cpp = ("#include <c10/cuda/CUDAStream.h>\n\n"
           f"void launch({params}, float* out, {sizes}, cudaStream_t s);\n\n"
           f"torch::Tensor run({tparams}) {{\n{_check(t, 'cuda')}"
           f"  auto out = {_alloc(t)};\n"
           f"  launch({data}, out.data_ptr<float>(), {size_vals}, c10::cuda::getCurrentCUDAStream());\n"
           "  return out;\n}\n")
    sources = f'cuda_src = r"""\n{cuda}"""\n\ncpp_src = r"""\n{cpp}"""\n'
    return _module(t, sources, 'name="fused", cpp_sources=cpp_src, cuda_sources=cuda_src, ')


def cpu_answer(t: FamilyTask) -> str:
    """The cpu twin: the same expression lines in a plain C++ loop (cpp_sources only)."""
    _args, _params, ptrs, tparams = _names(t)
    ptr_decl = "".join(f"  const float* {a} = {a}_t.data_ptr<float>();\n" for a in ptrs.split(", "))
    tparams = ", ".join(p + "_t" for p in tparams.split(", "))
    head = (f"torch::Tensor run({tparams}) {{\n" + _check(t, "cpu").replace("x.", "x_t.")
            + f"  auto out_t = {_alloc(t).replace('x.', 'x_t.').replace('(x)', '(x_t)')};\n{ptr_decl}"
            "  float* out = out_t.data_ptr<float>();\n")
    if t.kind == "ew":
        loop = ("  for (long i = 0; i < n; i++) {\n" + _body(t, "    ", "i", "i % m" if t.y_row else "")
                + "    out[i] = v;\n  }\n")
        head += "  long n = x_t.numel();\n" + ("  long m = y_t.numel();\n" if t.y_row else "")
    else:
        loop = "  for (long r = 0; r < rows; r++) {\n" + _row_loop(t, "    ") + "  }\n"
        head += "  long rows = x_t.size(0), cols = x_t.size(1);\n"
    cpp = f"{head}{loop}  return out_t;\n}}\n"
    sources = f'cpp_src = r"""\n#include <cmath>\n\n{cpp}"""\n'
    return _module(t, sources, 'name="fused", cpp_sources=cpp_src, extra_cflags=["-O2"], ')


def answer(t: FamilyTask, backend: str) -> str:
    """The teacher's ModelNew file for ``backend`` (cuda or cpu)."""
    if backend == "cuda":
        return cuda_answer(t)
    if backend == "cpu":
        return cpu_answer(t)
    raise ValueError(f"teacher_compact: backend must be cuda or cpu, got {backend!r}")
