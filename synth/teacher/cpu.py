"""C++ kernels for the teacher's cpu backend: one ``run_k<i>`` function per plan step.

Plain serial loops over ``float*`` (compiled with -O3); no OpenMP or ATen threading, so a kernel
starts no threads the verifier would have to account for. Same launcher signatures as
synth/teacher/cuda.py, so the host wrapper is shared. ``bug`` names the planted bug ("" for none).

    pointwise  one loop over output elements, strided/broadcast operands, direct-index fast path
    reduce     [outer, R, inner] loops, the reduced extent innermost when inner == 1
    softmax    three passes per (outer, inner) line
    layernorm  two-pass mean / variance per row, optional affine
    matmul     i-k-j loops over a row accumulator (contiguous inner loop on row-major B)
"""

from __future__ import annotations

PRELUDE = r"""
static void km_copy(const TV& src, float* dst) {
  const int64_t n = tv_numel(src);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, off = 0;
    for (int d = src.nd - 1; d >= 0; --d) { int64_t c = rem % src.sz[d]; rem /= src.sz[d]; off += c * src.st[d]; }
    dst[i] = src.p[off];
  }
}
"""


def operand_code(a, nd: int, nin: int, ind: str, unroll: str = "") -> str:
    """C/CUDA statements, indented by ``ind``, that load each operand of element ``i`` of a fused
    pointwise step (offsets strided against the output shape when not all operands are direct) and
    compute its body. Shared by the cpu loop and the cuda kernel; ``unroll`` is a pragma line for
    the coordinate loop (cuda), placed before it."""
    offs = "".join(f"{ind}int64_t o{k} = i;\n" for k in range(nin))
    if nd > 0:
        coord = "".join(f"{ind}  int64_t p{k} = 0;\n" for k in range(nin))
        acc = "".join(f"{ind}    p{k} += c * a.st[{k}][d];\n" for k in range(nin))
        pick = "".join(f"{ind}  if (!a.direct[{k}]) o{k} = p{k};\n" for k in range(nin))
        pragma = f"{ind}  {unroll}\n" if unroll else ""
        offs += (f"{ind}if (!a.all_direct) {{\n{ind}  int64_t rem = i;\n{coord}{pragma}"
                 f"{ind}  for (int d = {nd - 1}; d >= 0; --d) {{\n"
                 f"{ind}    int64_t c = rem % a.sz[d]; rem /= a.sz[d];\n{acc}{ind}  }}\n{pick}{ind}}}\n")
    loads = "".join(f"{ind}const float L{k} = a.in[{k}][o{k}];\n" for k in range(nin))
    body = "".join(f"{ind}{line}\n" for line in a["body"])
    return offs + loads + body


def pointwise(i: int, step, nd: int, nin: int, bug: str, threads: int = 0) -> str:
    a = step.args
    bound = "n - 1" if bug == "off_by_one" else "n"
    ops = operand_code(a, nd, nin, "    ")
    return (f"static void run_k{i}(float* out, int64_t n, const PW{i}Args& a) {{\n"
            f"  for (int64_t i = 0; i < {bound}; ++i) {{\n{ops}"
            f"    out[i] = {a['result']};\n  }}\n}}\n")


def _combine(op: str) -> tuple[str, str]:
    return {"sum": ("0.0", "acc + v"), "mean": ("0.0", "acc + v"),
            "max": ("-INFINITY", "std::fmax(acc, v)"), "min": ("INFINITY", "std::fmin(acc, v)")}[op]


def reduce(i: int, step, bug: str, threads: int = 0) -> str:
    a = step.args
    op = "mean" if a["mean"] else a["op"]
    ident, comb = _combine(op)
    rbound = {"off_by_one": "R - 1", "missing_bounds_check": "R + 1"}.get(bug, "R")
    index = "x[(o * R + r) * inner + j]" if bug != "wrong_stride" else "x[o * R * inner + r + j]"
    fin = "acc / (float)R" if a["mean"] else "acc"
    acc_t = "double" if op in ("sum", "mean") else "float"  # long serial sums accumulate in double
    if bug == "missing_sync":  # cpu flavour: the accumulator is not reset for each output
        head, reset = f"  {acc_t} acc = {ident};\n", ""
    else:
        head, reset = "", f"      {acc_t} acc = {ident};\n"
    return (f"static void run_k{i}(const float* x, float* y, int64_t outer, int64_t R, int64_t inner) {{\n{head}"
            f"  for (int64_t o = 0; o < outer; ++o) {{\n"
            f"    for (int64_t j = 0; j < inner; ++j) {{\n{reset}"
            f"      for (int64_t r = 0; r < {rbound}; ++r) {{ const float v = {index}; acc = {comb}; }}\n"
            f"      y[o * inner + j] = (float)({fin});\n"
            f"    }}\n  }}\n}}\n")


def softmax(i: int, step, bug: str, threads: int = 0) -> str:
    log = step.args["log"]
    rb = {"off_by_one": "R - 1", "missing_bounds_check": "R + 1"}.get(bug, "R")
    base = "(o * R) * inner + j" if bug != "wrong_stride" else "o * R + j"
    write = ("y[b + r * inner] = x[b + r * inner] - mx - std::log(s);" if log
             else "y[b + r * inner] = std::exp(x[b + r * inner] - mx) * inv;")
    if bug == "missing_sync":
        head, reset = "  float s = 0.0f;\n", ""
    else:
        head, reset = "", "      float s = 0.0f;\n"
    return (f"static void run_k{i}(const float* x, float* y, int64_t outer, int64_t R, int64_t inner) {{\n{head}"
            f"  for (int64_t o = 0; o < outer; ++o) {{\n"
            f"    for (int64_t j = 0; j < inner; ++j) {{\n"
            f"      const int64_t b = {base};\n"
            f"      float mx = -INFINITY;\n"
            f"      for (int64_t r = 0; r < R; ++r) mx = std::fmax(mx, x[b + r * inner]);\n{reset}"
            f"      for (int64_t r = 0; r < {rb}; ++r) s += std::exp(x[b + r * inner] - mx);\n"
            f"      const float inv = 1.0f / s;\n"
            f"      (void)inv;\n"
            f"      for (int64_t r = 0; r < R; ++r) {write}\n"
            f"    }}\n  }}\n}}\n")


def layernorm(i: int, step, bug: str, threads: int = 0) -> str:
    rb = {"off_by_one": "N - 1", "missing_bounds_check": "N + 1"}.get(bug, "N")
    if bug == "missing_sync":
        head, reset = "  float s = 0.0f;\n", ""
    else:
        head, reset = "", "    float s = 0.0f;\n"
    return (f"static void run_k{i}(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t N, float eps) {{\n{head}"
            f"  for (int64_t row = 0; row < rows; ++row) {{\n"
            f"    const float* xr = x + row * N;\n"
            f"    float* yr = y + row * N;\n{reset}"
            f"    for (int64_t c = 0; c < {rb}; ++c) s += xr[c];\n"
            f"    const float mean = s / (float)N;\n"
            f"    float q = 0.0f;\n"
            f"    for (int64_t c = 0; c < N; ++c) {{ const float d = xr[c] - mean; q += d * d; }}\n"
            f"    const float rstd = 1.0f / std::sqrt(q / (float)N + eps);\n"
            f"    for (int64_t c = 0; c < N; ++c) {{\n"
            f"      float v = (xr[c] - mean) * rstd;\n"
            f"      if (w) v *= w[c];\n"
            f"      if (b) v += b[c];\n"
            f"      yr[c] = v;\n    }}\n  }}\n}}\n")


def matmul(i: int, step, bug: str, tile: int = 0) -> str:
    # Rows accumulate in one reused scratch row. The missing_sync bug skips clearing it, so each row
    # starts from the previous row's sums: wrong from the second row on, whatever memory held.
    kb = {"off_by_one": "a.K - 1", "missing_bounds_check": "a.K + 1"}.get(bug, "a.K")
    bidx = "B[k * a.sbk + j * a.sbn]" if bug != "wrong_stride" else "B[k * a.sbn + j * a.sbk]"
    reset = "" if bug == "missing_sync" else "      std::fill(acc.begin(), acc.end(), 0.0f);\n"
    return (f"static void run_k{i}(const KMMatmulArgs& a, float* c) {{\n"
            f"  std::vector<float> acc(a.N, 0.0f);\n"
            f"  for (int64_t bt = 0; bt < a.batch; ++bt) {{\n"
            f"    const float* A = a.a + bt * a.sab;\n"
            f"    const float* B = a.b + bt * a.sbb;\n"
            f"    for (int64_t i = 0; i < a.M; ++i) {{\n"
            f"      float* cr = c + (bt * a.M + i) * a.N;\n{reset}"
            f"      for (int64_t k = 0; k < {kb}; ++k) {{\n"
            f"        const float av = A[i * a.sam + k * a.sak];\n"
            f"        for (int64_t j = 0; j < a.N; ++j) acc[j] += av * {bidx};\n"
            f"      }}\n"
            f"      for (int64_t j = 0; j < a.N; ++j) {{\n"
            f"        float v = a.alpha * acc[j];\n"
            f"        if (a.bias) v += a.beta * a.bias[i * a.sbias_m + j * a.sbias_n];\n"
            f"        cr[j] = v;\n      }}\n"
            f"    }}\n  }}\n}}\n")
