"""The built-in teacher: offline, deterministic kernel writer for the op families it can lower.

``write_candidate(reference_code, backend, bug=..., variant=...)`` returns a complete candidate
file (``ModelNew`` + literal C++/CUDA sources + a module-level ``load_inline``) for the reference.
``teacher_response(messages, backend, ...)`` is what the ``teacher`` generator answers to a chat:
on a first turn, a reasoning section and the code, a planted bug in the samples chosen for one;
on a repair turn (the last user message carries verifier feedback), the correct version with a
short explanation that quotes the feedback.

Lowering (synth/teacher/lowering.py) gives a plan; this module writes the shared host wrapper (a
``forward`` C++ function that allocates outputs with ``torch::empty`` and launches one kernel per
step) and takes each step's kernel from synth/teacher/cuda.py or synth/teacher/cpu.py. Views are
metadata on a small ``TV`` struct (pointer, sizes, strides), so no aten view or copy op runs.

Planted bugs (``BUG_KINDS``: the writer's kinds of the one catalogue, synth/teacher/bugs.py), each only where
it changes the result on the task's own shapes:
    off_by_one            loop or guard bound one short
    missing_bounds_check  cuda: guard/tail check dropped; cpu: a row loop reads one past its end
    wrong_stride          a broadcast operand indexed as if full-size, a column/matrix stride swapped
    missing_sync          cuda: a __syncthreads() removed; cpu: an accumulator not reset per output
    forbidden_fallback    forward re-runs the reference in PyTorch when the output looks non-finite
Not guaranteed: that the verifier detects a planted bug (a race may happen to give the right answer).
"""

from __future__ import annotations

import ast
import math
import re

from kernelmill.schema import content_hash
from synth.teacher import cpu as teacher_cpu, cuda as teacher_cuda
from synth.teacher.bugs import WRITER_BUGS, explain
from synth.teacher.lowering import Program, Step, Unsupported, lower_reference

BUG_KINDS = WRITER_BUGS  # off_by_one, missing_bounds_check, wrong_stride, missing_sync, forbidden_fallback
# Sample variants: launch geometry differs, so the samples of one task are not identical text.
VARIANTS = ({"threads": 256, "tile": 16}, {"threads": 128, "tile": 32}, {"threads": 512, "tile": 16})
DECLINE_PREFIX = "The teacher declines this task:"

HOST_PRELUDE = r"""
#include <torch/extension.h>
#include <cmath>
#include <cstdint>
#include <vector>
#include <algorithm>

#define KM_MAXD 8
// A tensor view as plain metadata: views (reshape, permute, expand, slice) never dispatch an op.
struct TV { float* p; int nd; int64_t sz[KM_MAXD]; int64_t st[KM_MAXD]; };

static TV tv_of(const torch::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "expected a float32 tensor");
  TORCH_CHECK(t.dim() <= KM_MAXD, "at most 8 dims");
  TV v; v.p = t.data_ptr<float>(); v.nd = (int)t.dim();
  for (int d = 0; d < v.nd; ++d) { v.sz[d] = t.size(d); v.st[d] = t.stride(d); }
  return v;
}
static int64_t tv_numel(const TV& v) { int64_t n = 1; for (int d = 0; d < v.nd; ++d) n *= v.sz[d]; return n; }
static bool tv_contig(const TV& v) {
  int64_t s = 1;
  for (int d = v.nd - 1; d >= 0; --d) { if (v.sz[d] != 1 && v.st[d] != s) return false; s *= v.sz[d]; }
  return true;
}
static std::vector<int64_t> tv_sizes(const TV& v) { return std::vector<int64_t>(v.sz, v.sz + v.nd); }
static TV tv_alloc(std::vector<torch::Tensor>& keep, const std::vector<int64_t>& shape, const torch::TensorOptions& o) {
  keep.push_back(torch::empty(shape, o));
  return tv_of(keep.back());
}
static void km_copy(const TV& src, float* dst);
static TV tv_contiguous(std::vector<torch::Tensor>& keep, const TV& v, const torch::TensorOptions& o) {
  if (tv_contig(v)) return v;
  TV c = tv_alloc(keep, tv_sizes(v), o);
  km_copy(v, c.p);
  return c;
}
static TV tv_view(std::vector<torch::Tensor>& keep, const TV& v0, std::vector<int64_t> shape, const torch::TensorOptions& o) {
  TV v = tv_contiguous(keep, v0, o);
  int64_t n = tv_numel(v), known = 1; int neg = -1;
  for (size_t d = 0; d < shape.size(); ++d) { if (shape[d] < 0) neg = (int)d; else known *= shape[d]; }
  if (neg >= 0) shape[neg] = known ? n / known : 0;
  int64_t total = 1; for (auto s : shape) total *= s;
  TORCH_CHECK(total == n, "view: shape does not match the number of elements");
  TV r; r.p = v.p; r.nd = (int)shape.size();
  int64_t s = 1;
  for (int d = r.nd - 1; d >= 0; --d) { r.sz[d] = shape[d]; r.st[d] = s; s *= shape[d]; }
  return r;
}
static TV tv_permute(const TV& v, const std::vector<int>& perm) {
  TV r = v;
  for (int d = 0; d < v.nd; ++d) { r.sz[d] = v.sz[perm[d]]; r.st[d] = v.st[perm[d]]; }
  return r;
}
static TV tv_unsqueeze(const TV& v, int dim) {
  TV r; r.p = v.p; r.nd = v.nd + 1;
  for (int d = 0, s = 0; d < r.nd; ++d) {
    if (d == dim) { r.sz[d] = 1; r.st[d] = dim < v.nd ? v.sz[dim] * v.st[dim] : 1; }
    else { r.sz[d] = v.sz[s]; r.st[d] = v.st[s]; ++s; }
  }
  return r;
}
static TV tv_squeeze(const TV& v, const std::vector<int>& dims_desc) {
  TV r = v;
  for (int dim : dims_desc) {
    if (r.sz[dim] != 1) continue;
    for (int d = dim; d < r.nd - 1; ++d) { r.sz[d] = r.sz[d + 1]; r.st[d] = r.st[d + 1]; }
    r.nd -= 1;
  }
  return r;
}
static TV tv_expand(const TV& v, const std::vector<int64_t>& shape) {
  TV r; r.p = v.p; r.nd = (int)shape.size();
  int off = r.nd - v.nd;
  for (int d = 0; d < r.nd; ++d) {
    int s = d - off;
    int64_t have = s >= 0 ? v.sz[s] : 1, hst = s >= 0 ? v.st[s] : 0;
    int64_t want = shape[d] < 0 ? have : shape[d];
    r.sz[d] = want; r.st[d] = (have == want) ? hst : 0;
  }
  return r;
}
static TV tv_slice(const TV& v, int dim, int64_t start, int64_t end, int64_t step) {
  TV r = v;
  const int64_t n = v.sz[dim];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::min(std::max<int64_t>(start, 0), n);
  end = std::min(std::max<int64_t>(end, start), n);
  r.p = v.p + start * v.st[dim];
  r.sz[dim] = (end - start + step - 1) / step;
  r.st[dim] = v.st[dim] * step;
  return r;
}
// Broadcast shape of the operands, right-aligned to nd dims.
static std::vector<int64_t> km_bcast(const std::vector<TV>& ops, int nd) {
  std::vector<int64_t> shape(nd, 1);
  for (const TV& v : ops) {
    TORCH_CHECK(v.nd <= nd, "operand has more dims than the result");
    for (int d = 0; d < v.nd; ++d) {
      int64_t& s = shape[nd - v.nd + d];
      if (s == 1) s = v.sz[d];
      else TORCH_CHECK(v.sz[d] == 1 || v.sz[d] == s, "shapes do not broadcast");
    }
  }
  return shape;
}
// Strides of v seen through the broadcast to out (0 along broadcast dims).
static void km_bstrides(const TV& v, const TV& out, int64_t* st) {
  for (int d = 0; d < out.nd; ++d) {
    int s = d - (out.nd - v.nd);
    st[d] = (s < 0 || v.sz[s] == 1) ? 0 : v.st[s];
  }
}
// True when v can be read with the output's flat index (same sizes, contiguous).
static bool km_direct(const TV& v, const TV& out) {
  if (v.nd != out.nd || !tv_contig(v)) return false;
  for (int d = 0; d < v.nd; ++d) if (v.sz[d] != out.sz[d]) return false;
  return true;
}
// The result as a tensor: the buffer it lives in when it is a plain contiguous view of one.
static torch::Tensor km_result(std::vector<torch::Tensor>& keep, const TV& v, const torch::TensorOptions& o) {
  for (auto it = keep.rbegin(); it != keep.rend(); ++it) {
    if (it->data_ptr<float>() == v.p && it->numel() == tv_numel(v) && tv_contig(v)) {
      if (tv_sizes(v) == it->sizes().vec()) return *it;
      return it->view(tv_sizes(v));
    }
  }
  torch::Tensor out = torch::empty(tv_sizes(v), o);
  km_copy(v, out.data_ptr<float>());
  return out;
}
struct KMMatmulArgs {
  const float* a; const float* b; const float* bias;
  int64_t batch, M, N, K;
  int64_t sab, sam, sak, sbb, sbk, sbn, sbias_m, sbias_n;
  float alpha, beta;
};
"""


class TeacherDeclined(Exception):
    """The teacher cannot write a kernel for this task; the message says why."""


# ---------------------------------------------------------------------------- bug sites


def _leaf_broadcast(prog: Program, step: Step) -> bool:
    out = prog.shapes[step.out]
    return any(tuple(prog.shapes[leaf]) != tuple(out) for leaf in step.args["leaves"])


def _outer_inner(prog: Program, step: Step) -> tuple[int, int, int]:
    shape = prog.shapes[step.args["x"]]
    if step.kind == "softmax":
        d0 = d1 = step.args["dim"]
    else:
        d0, d1 = step.args["d0"], step.args["d1"]
    return math.prod(shape[:d0]), math.prod(shape[d0:d1 + 1]), math.prod(shape[d1 + 1:])


def bug_sites(prog: Program, backend: str) -> dict[str, int]:
    """Bug kind -> index (into prog.kernels()) of the first kernel where it changes the result on the
    task's own shapes. forbidden_fallback is always available (site -1: the Python forward)."""
    sites: dict[str, int] = {}
    threads = VARIANTS[0]["threads"]
    for idx, s in enumerate(prog.kernels()):
        kinds = ["off_by_one"]
        if s.kind == "pointwise":
            n = math.prod(prog.shapes[s.out])
            if backend == "cuda" and n % threads:
                kinds.append("missing_bounds_check")
            if _leaf_broadcast(prog, s):
                kinds.append("wrong_stride")
        elif s.kind in ("reduce", "softmax"):
            outer, r, inner = _outer_inner(prog, s)
            # cpu: one element past the row; only a sum/max/min/mean shows it (softmax absorbs it)
            if (backend == "cpu" and s.kind == "reduce") or (backend == "cuda" and inner == 1 and r % threads):
                kinds.append("missing_bounds_check")
            if inner > 1 and outer > 1:
                kinds.append("wrong_stride")
            if (backend == "cpu" and outer * inner > 1) or (backend == "cuda" and inner == 1 and (
                    s.kind == "softmax" or s.args["op"] in ("sum", "mean"))):
                kinds.append("missing_sync")
        elif s.kind == "layernorm":
            n = math.prod(prog.shapes[s.args["x"]][-s.args["norm_ndim"]:])
            if backend == "cuda" and n % threads:
                kinds.append("missing_bounds_check")
            kinds.append("missing_sync")
        elif s.kind == "matmul":
            a = s.args
            if backend == "cpu" or any(v % VARIANTS[0]["tile"] for v in (a["m"], a["n"], a["k"])):
                kinds.append("missing_bounds_check")
            kinds += ["wrong_stride", "missing_sync"]
        for k in kinds:
            sites.setdefault(k, idx)
    sites["forbidden_fallback"] = -1
    return sites


def choose_bug(reference_code: str, backend: str, sample: int, n: int, bug_rate: float, seed: int) -> str:
    """The bug planted in first-turn sample ``sample`` of ``n`` ("" for none), deterministically.

    Exactly round(bug_rate * n) samples get one (at least one when bug_rate > 0 and n * bug_rate
    >= 0.5); which samples, and which of the kinds that apply to this task, come from a hash of
    (reference, backend, seed)."""
    n_buggy = int(round(bug_rate * n + 1e-9))
    if n_buggy <= 0:
        return ""
    h = int(content_hash(reference_code, backend, str(seed)), 16)
    if (sample - h) % n >= n_buggy:
        return ""
    try:
        sites = bug_sites(lower_reference(reference_code), backend)
    except (Unsupported, ValueError):
        return ""
    kinds = [k for k in BUG_KINDS if k in sites]
    return kinds[(h // 7 + sample) % len(kinds)]


# ---------------------------------------------------------------------------- host wrapper


def _cpp_list(xs) -> str:
    return "{" + ", ".join(x if isinstance(x, str) else str(int(x)) for x in xs) + "}"


def _host_step(i: int, s: Step, prog: Program, bug: str) -> str:
    a, v = s.args, lambda name: f"v_{name}"  # noqa: E731
    if s.kind == "view":
        src, op = v(a["src"]), a["op"]
        expr = {"alias": lambda: src,
                "view": lambda: f"tv_view(keep, {src}, {_cpp_list(a['shape'])}, opts)",
                "permute": lambda: f"tv_permute({src}, {_cpp_list(a['perm'])})",
                "unsqueeze": lambda: f"tv_unsqueeze({src}, {a['dim']})",
                "squeeze": lambda: f"tv_squeeze({src}, {_cpp_list(a['dims'])})",
                "expand": lambda: f"tv_expand({src}, {_cpp_list(a['shape'])})",
                "slice": lambda: f"tv_slice({src}, {a['dim']}, {a['start']}LL, {a['end']}LL, {a['step']}LL)"}[op]()
        return f"  TV {v(s.out)} = {expr};\n"
    if s.kind == "pointwise":
        leaves, nd = a["leaves"], a["rank"]
        lines = [f"  TV {v(s.out)};", "  {",
                 f"    std::vector<int64_t> shape = km_bcast({{{', '.join(v(x) for x in leaves)}}}, {nd});",
                 "    TV o = tv_alloc(keep, shape, opts);", f"    PW{i}Args args;", "    args.all_direct = true;"]
        for k, leaf in enumerate(leaves):
            direct = f"km_direct({v(leaf)}, o)"
            if bug == "wrong_stride" and tuple(prog.shapes[leaf]) != tuple(prog.shapes[s.out]):
                direct = "true"  # the planted bug: indexes the broadcast operand with the flat output index
            lines += [f"    args.in[{k}] = {v(leaf)}.p;", f"    km_bstrides({v(leaf)}, o, args.st[{k}]);",
                      f"    args.direct[{k}] = {direct};", f"    args.all_direct = args.all_direct && args.direct[{k}];"]
        lines += [f"    for (int d = 0; d < {nd}; ++d) args.sz[d] = o.sz[d];" if nd else "",
                  f"    run_k{i}(o.p, tv_numel(o), args);", f"    {v(s.out)} = o;", "  }"]
        return "\n".join(x for x in lines if x) + "\n"
    if s.kind in ("reduce", "softmax"):
        d0, d1 = (a["dim"], a["dim"]) if s.kind == "softmax" else (a["d0"], a["d1"])
        out_shape = ("tv_sizes(x)" if s.kind == "softmax" else "shape")
        shape_code = ""
        if s.kind == "reduce":
            keep1 = "shape.push_back(1);" if a["keepdim"] else ""
            shape_code = (f"    std::vector<int64_t> shape;\n"
                          f"    for (int d = 0; d < x.nd; ++d) {{ if (d < {d0} || d > {d1}) shape.push_back(x.sz[d]); else {{ {keep1} }} }}\n"
                          f"    if ({d0} > {d1}) shape = tv_sizes(x);\n")
        return (f"  TV {v(s.out)};\n  {{\n"
                f"    TV x = tv_contiguous(keep, {v(a['x'])}, opts);\n"
                f"    int64_t outer = 1, R = 1, inner = 1;\n"
                f"    for (int d = 0; d < x.nd; ++d) {{ if (d < {d0}) outer *= x.sz[d]; else if (d <= {d1}) R *= x.sz[d]; else inner *= x.sz[d]; }}\n"
                f"{shape_code}"
                f"    TV o = tv_alloc(keep, {out_shape}, opts);\n"
                f"    run_k{i}(x.p, o.p, outer, R, inner);\n"
                f"    {v(s.out)} = o;\n  }}\n")
    if s.kind == "layernorm":
        w = f"tv_contiguous(keep, {v(a['w'])}, opts).p" if a["w"] else "nullptr"
        b = f"tv_contiguous(keep, {v(a['b'])}, opts).p" if a["b"] else "nullptr"
        return (f"  TV {v(s.out)};\n  {{\n"
                f"    TV x = tv_contiguous(keep, {v(a['x'])}, opts);\n"
                f"    int64_t N = 1;\n"
                f"    for (int d = x.nd - {a['norm_ndim']}; d < x.nd; ++d) N *= x.sz[d];\n"
                f"    TV o = tv_alloc(keep, tv_sizes(x), opts);\n"
                f"    run_k{i}(x.p, {w}, {b}, o.p, N ? tv_numel(x) / N : 0, N, {a['eps']!r}f);\n"
                f"    {v(s.out)} = o;\n  }}\n")
    if s.kind == "matmul":
        batched = a["batched"]
        bias = ""
        if a["bias"]:
            bias = (f"    {{ TV bt = {v(a['bias'])}; TV o2 = o; o2.nd = 2; o2.sz[0] = args.M; o2.sz[1] = args.N;\n"
                    f"      int64_t bst[KM_MAXD]; km_bstrides(bt, o2, bst);\n"
                    f"      args.bias = bt.p; args.sbias_m = bst[0]; args.sbias_n = bst[1]; }}\n")
        if batched:
            dims = ("args.batch = A.sz[0]; args.M = A.sz[1]; args.K = A.sz[2]; args.N = B.sz[2];\n"
                    "    args.sab = A.st[0]; args.sam = A.st[1]; args.sak = A.st[2];\n"
                    "    args.sbb = B.st[0]; args.sbk = B.st[1]; args.sbn = B.st[2];\n"
                    "    TORCH_CHECK(A.nd == 3 && B.nd == 3 && B.sz[1] == args.K && B.sz[0] == args.batch, \"bmm: shapes\");\n"
                    "    TV o = tv_alloc(keep, {args.batch, args.M, args.N}, opts);\n")
        else:
            dims = ("args.batch = 1; args.M = A.sz[0]; args.K = A.sz[1]; args.N = B.sz[1];\n"
                    "    args.sab = 0; args.sam = A.st[0]; args.sak = A.st[1];\n"
                    "    args.sbb = 0; args.sbk = B.st[0]; args.sbn = B.st[1];\n"
                    "    TORCH_CHECK(A.nd == 2 && B.nd == 2 && B.sz[0] == args.K, \"mm: shapes\");\n"
                    "    TV o = tv_alloc(keep, {args.M, args.N}, opts);\n")
        return (f"  TV {v(s.out)};\n  {{\n"
                f"    TV A = {v(a['a'])}, B = {v(a['b'])};\n"
                f"    KMMatmulArgs args;\n"
                f"    args.a = A.p; args.b = B.p; args.bias = nullptr; args.sbias_m = 0; args.sbias_n = 0;\n"
                f"    args.alpha = {a['alpha']!r}f; args.beta = {a['beta']!r}f;\n"
                f"    {dims}{bias}"
                f"    run_k{i}(args, o.p);\n"
                f"    {v(s.out)} = o;\n  }}\n")
    raise AssertionError(s.kind)


def _pw_struct(i: int, nd: int, nin: int) -> str:
    nd1 = max(nd, 1)
    return (f"struct PW{i}Args {{ const float* in[{nin}]; int64_t st[{nin}][{nd1}]; int64_t sz[{nd1}];"
            f" bool direct[{nin}]; bool all_direct; }};\n")


def _sources(prog: Program, backend: str, bug: str, variant: dict) -> tuple[str, str]:
    """(cpp_source, cuda_source) for the plan; cuda_source is "" on cpu."""
    emit = teacher_cuda if backend == "cuda" else teacher_cpu
    sites = bug_sites(prog, backend) if bug else {}
    bug_at = sites.get(bug, -2) if bug != "forbidden_fallback" else -2
    kernels, host, structs = [], [], []
    kidx = 0
    for s in prog.steps:
        if s.kind == "view":
            host.append(_host_step(-1, s, prog, ""))
            continue
        i, kbug = kidx, (bug if kidx == bug_at else "")
        kidx += 1
        if s.kind == "pointwise":
            structs.append(_pw_struct(i, s.args["rank"], len(s.args["leaves"])))
            kernels.append(emit.pointwise(i, s, s.args["rank"], len(s.args["leaves"]), kbug, variant["threads"]))
        elif s.kind == "matmul":
            kernels.append(emit.matmul(i, s, kbug, variant["tile"]))
        else:
            kernels.append(getattr(emit, s.kind)(i, s, kbug, variant["threads"]))
        host.append(_host_step(i, s, prog, kbug))
    params = ", ".join(f"torch::Tensor {n}" for n in prog.arg_names)
    dev_check = "".join(f"  TORCH_CHECK({n}.is_cuda(), \"{n} must be a CUDA tensor\");\n" for n in prog.arg_names) \
        if backend == "cuda" else ""
    first = prog.arg_names[0]
    wrapper = (f"torch::Tensor forward({params}) {{\n{dev_check}"
               f"  auto opts = {first}.options();\n"
               f"  std::vector<torch::Tensor> keep;  // owns every intermediate until forward returns\n"
               + "".join(f"  TV v_{n} = tv_of({n});\n" for n in prog.arg_names)
               + "".join(host)
               + f"  return km_result(keep, v_{prog.output}, opts);\n}}\n")
    nosync = teacher_cuda.NOSYNC_HELPER if backend == "cuda" and bug == "missing_sync" and bug_at >= 0 \
        and prog.kernels()[bug_at].kind != "matmul" else ""
    body = (HOST_PRELUDE + "".join(structs) + emit.PRELUDE + nosync + "\n" + "\n".join(kernels) + "\n" + wrapper)
    if backend == "cuda":
        return f"torch::Tensor forward({params});\n", body
    return body, ""


def _forward_source(prog: Program, reference_code: str, bug: str) -> str:
    params = ", ".join(["self"] + prog.forward_params)
    call = f"_ext.forward({', '.join(prog.arg_exprs)})"
    if bug != "forbidden_fallback":
        return f"    def forward({params}):\n        return {call}\n"
    # the planted bug: a "safety net" that recomputes with PyTorch (forbidden compute, every call)
    ref_fwd = _reference_forward(reference_code).replace("def forward(", "def _torch_forward(", 1)
    return (f"    def forward({params}):\n        out = {call}\n"
            f"        if not torch.isfinite(out).all():\n"
            f"            out = self._torch_forward({', '.join(prog.forward_params)})\n"
            f"        return out\n\n" + _indent(ref_fwd, 4))


def _reference_forward(code: str) -> str:
    for node in ast.parse(code).body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    return ast.unparse(item) + "\n"
    raise TeacherDeclined("no Model.forward")


def _indent(text: str, n: int) -> str:
    return "".join((" " * n + line) if line.strip() else line for line in text.splitlines(True))


def write_candidate(reference_code: str, backend: str, *, bug: str = "", variant: int = 0) -> str:
    """The candidate file for a reference: deterministic in (reference, backend, bug, variant).

    Raises TeacherDeclined when the reference uses an op outside the teacher's families."""
    if backend not in ("cuda", "cpu"):
        raise TeacherDeclined(f"backend {backend!r} (the teacher writes cuda and cpu)")
    try:
        prog = lower_reference(reference_code)
    except Unsupported as e:
        raise TeacherDeclined(f"unsupported: {e}") from None
    except ValueError as e:
        raise TeacherDeclined(str(e)) from None
    var = VARIANTS[variant % len(VARIANTS)]
    cpp, cuda = _sources(prog, backend, bug, var)
    name = "km_teacher_" + content_hash(cpp, cuda, n=12)
    cuda_line = "    cuda_sources=CUDA_SOURCE,\n" if cuda else ""
    cuda_const = f'CUDA_SOURCE = r"""{cuda}"""\n\n' if cuda else ""
    extra_cuda = '    extra_cuda_cflags=["-O3"],\n' if cuda else ""
    imports = ["import torch", "import torch.nn as nn", "from torch.utils.cpp_extension import load_inline"]
    for line in prog.prelude_source.splitlines():
        if line not in imports:
            imports.append(line)
    return ("\n".join(imports) + "\n\n"
            f'CPP_SOURCE = r"""{cpp}"""\n\n{cuda_const}'
            f"_ext = load_inline(\n    name={name!r},\n    cpp_sources=CPP_SOURCE,\n{cuda_line}"
            f'    functions=["forward"],\n    extra_cflags=["-O3"],\n{extra_cuda}    verbose=False,\n)\n\n\n'
            "class ModelNew(nn.Module):\n" + _indent(prog.init_source, 4) + "\n\n"
            + _forward_source(prog, reference_code, bug))


# ---------------------------------------------------------------------------- chat responses

_CODE_RE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def reference_from_messages(messages) -> str:
    """The reference program of a conversation: the first python block of the first user message."""
    for m in messages:
        if m.role == "user":
            blocks = _CODE_RE.findall(m.content)
            if blocks:
                return blocks[0]
            break
    raise TeacherDeclined("no reference program in the first user message")


def decline_text(reason: str) -> str:
    return f"{DECLINE_PREFIX} {reason}. No candidate is given."


def is_decline(response: str) -> bool:
    return response.startswith(DECLINE_PREFIX)


def first_turn_response(reference_code: str, backend: str, *, bug: str, variant: int, reasoning: str) -> str:
    code = write_candidate(reference_code, backend, bug=bug, variant=variant)
    return f"{reasoning.rstrip()}\n\n```python\n{code}```\n"


def repair_response(reference_code: str, backend: str, feedback: str, previous_bug: str, variant: int) -> str:
    """The correct kernel after verifier feedback, with a short explanation that refers to it."""
    code = write_candidate(reference_code, backend, bug="", variant=variant)
    quoted = " ".join(feedback.strip().split())[:300] or "the previous candidate failed"
    cause = explain(previous_bug)
    return (f"The verifier reported: \"{quoted}\"\n\nDiagnosis: {cause}.\n\n"
            f"Corrected implementation:\n\n```python\n{code}```\n")
