"""CUDA kernels for the teacher: one ``__global__`` kernel and one ``run_k<i>`` launcher per plan step.

Every launcher has the signature the shared host wrapper (synth/teacher/writer.py) calls, and launches on
``at::cuda::getCurrentCUDAStream()``. Sizes are runtime arguments. ``bug`` names the planted bug
for this kernel ("" for none); the bug lines are the only difference from the correct kernel, so a
repair dialogue's fix is a small, real diff.

Kernels (float32):
    pointwise  one thread per output element, strided/broadcast operands, fast path for direct operands
    reduce     one block per row (warp-shuffle + shared-memory tree) when the reduced dims are innermost,
               else one thread per output element looping over the reduced extent (coalesced)
    softmax    same two shapes; three passes (max, sum of exp, write)
    layernorm  one block per row: mean, then variance, then the affine write
    matmul     shared-memory tiled (TILE x TILE), batch on grid.z, any operand strides, alpha/beta/bias
"""

from __future__ import annotations

from synth.teacher.cpu import operand_code

PRELUDE = r"""
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

static inline cudaStream_t km_stream() { return at::cuda::getCurrentCUDAStream(); }

struct KMCopyArgs { const float* src; int nd; int64_t sz[KM_MAXD]; int64_t st[KM_MAXD]; };

__global__ void km_copy_kernel(float* __restrict__ dst, int64_t n, KMCopyArgs a) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t rem = i, off = 0;
  for (int d = a.nd - 1; d >= 0; --d) { int64_t c = rem % a.sz[d]; rem /= a.sz[d]; off += c * a.st[d]; }
  dst[i] = a.src[off];
}

static void km_copy(const TV& src, float* dst) {
  KMCopyArgs a; a.src = src.p; a.nd = src.nd;
  for (int d = 0; d < src.nd; ++d) { a.sz[d] = src.sz[d]; a.st[d] = src.st[d]; }
  int64_t n = tv_numel(src);
  if (n == 0) return;
  km_copy_kernel<<<(unsigned)((n + 255) / 256), 256, 0, km_stream()>>>(dst, n, a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

__device__ __forceinline__ float km_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float km_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float km_warp_min(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide reductions: warp shuffles, one partial per warp in shared memory, warp 0 finishes.
// sh must hold 33 floats; every thread gets the result.
#define KM_BLOCK_REDUCE(NAME, WARP_OP, IDENT)                                  \
__device__ float NAME(float v, float* sh) {                                    \
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;                          \
  int nw = (blockDim.x + 31) >> 5;                                             \
  v = WARP_OP(v);                                                              \
  if (lane == 0) sh[w] = v;                                                    \
  __syncthreads();                                                             \
  if (w == 0) {                                                                \
    v = lane < nw ? sh[lane] : (IDENT);                                        \
    v = WARP_OP(v);                                                            \
    if (lane == 0) sh[32] = v;                                                 \
  }                                                                            \
  __syncthreads();                                                             \
  v = sh[32];                                                                  \
  __syncthreads();                                                             \
  return v;                                                                    \
}
KM_BLOCK_REDUCE(km_block_sum, km_warp_sum, 0.0f)
KM_BLOCK_REDUCE(km_block_max, km_warp_max, -INFINITY)
KM_BLOCK_REDUCE(km_block_min, km_warp_min, INFINITY)
"""

# The same block sum without the barrier between the per-warp partials and warp 0's read: a
# classic race. Emitted only when the missing_sync bug is planted in a row kernel.
NOSYNC_HELPER = r"""
__device__ float km_block_sum_nosync(float v, float* sh) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  int nw = (blockDim.x + 31) >> 5;
  v = km_warp_sum(v);
  if (lane == 0) sh[w] = v;
  if (w == 0) {
    v = lane < nw ? sh[lane] : 0.0f;
    v = km_warp_sum(v);
    if (lane == 0) sh[32] = v;
  }
  __syncthreads();
  v = sh[32];
  __syncthreads();
  return v;
}
"""

LAUNCH_CHECK = "  C10_CUDA_KERNEL_LAUNCH_CHECK();\n"


def pointwise(i: int, step, nd: int, nin: int, bug: str, threads: int) -> str:
    """Fused elementwise kernel k<i>; operands strided against the output shape."""
    a = step.args
    guard = "  if (i >= n) return;\n"
    if bug == "off_by_one":
        guard = "  if (i >= n - 1) return;\n"
    elif bug == "missing_bounds_check":
        guard = ""
    ops = operand_code(a, nd, nin, "  ", unroll="#pragma unroll")
    grid = f"(n + {threads} - 1) / {threads}"
    return (f"__global__ void k{i}_pointwise(float* __restrict__ out, int64_t n, PW{i}Args a) {{\n"
            f"  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n{guard}{ops}"
            f"  out[i] = {a['result']};\n}}\n\n"
            f"static void run_k{i}(float* out, int64_t n, const PW{i}Args& a) {{\n"
            f"  if (n == 0) return;\n"
            f"  k{i}_pointwise<<<(unsigned)({grid}), {threads}, 0, km_stream()>>>(out, n, a);\n"
            f"{LAUNCH_CHECK}}}\n")


def _combine(op: str) -> tuple[str, str, str]:
    """(identity, combine expression on acc and v, block reducer) for a reduction op."""
    return {"sum": ("0.0f", "acc + v", "km_block_sum"), "mean": ("0.0f", "acc + v", "km_block_sum"),
            "max": ("-INFINITY", "fmaxf(acc, v)", "km_block_max"),
            "min": ("INFINITY", "fminf(acc, v)", "km_block_min")}[op]


def reduce(i: int, step, bug: str, threads: int) -> str:
    """Reduction over the middle extent R of a contiguous [outer, R, inner] view."""
    a = step.args
    op = "mean" if a["mean"] else a["op"]
    ident, comb, block = _combine(op)
    if bug == "missing_sync" and block == "km_block_sum":
        block = "km_block_sum_nosync"
    rbound = "R - 1" if bug == "off_by_one" else "R"
    fin = "acc / (float)R" if a["mean"] else "acc"
    col_acc = "double" if op in ("sum", "mean") else "float"
    # rows: reduced dims innermost, a block per output element
    row_loop = (f"  for (int64_t r = threadIdx.x; r < {rbound}; r += blockDim.x) {{ float v = xr[r]; acc = {comb}; }}\n"
                if bug != "missing_bounds_check" else
                # strip-mined without the tail check: reads past the row when R % blockDim != 0
                f"  for (int64_t r0 = 0; r0 < R; r0 += blockDim.x) {{ float v = xr[r0 + threadIdx.x]; acc = {comb}; }}\n")
    col_index = "x[(o * R + r) * inner + j]" if bug != "wrong_stride" else "x[o * R * inner + r + j]"
    return (f"__global__ void k{i}_reduce_rows(const float* __restrict__ x, float* __restrict__ y, int64_t R) {{\n"
            f"  __shared__ float sh[33];\n"
            f"  const float* xr = x + (int64_t)blockIdx.x * R;\n"
            f"  float acc = {ident};\n{row_loop}"
            f"  acc = {block}(acc, sh);\n"
            f"  if (threadIdx.x == 0) y[blockIdx.x] = {fin};\n}}\n\n"
            f"__global__ void k{i}_reduce_cols(const float* __restrict__ x, float* __restrict__ y, int64_t outer, int64_t R, int64_t inner) {{\n"
            f"  int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"  if (t >= outer * inner) return;\n"
            f"  int64_t o = t / inner, j = t % inner;\n"
            f"  {col_acc} acc = {ident};  // long serial sums accumulate in double\n"
            f"  for (int64_t r = 0; r < {rbound}; ++r) {{ float v = {col_index}; acc = {comb}; }}\n"
            f"  y[t] = (float)({fin});\n}}\n\n"
            f"static void run_k{i}(const float* x, float* y, int64_t outer, int64_t R, int64_t inner) {{\n"
            f"  if (outer * inner == 0) return;\n"
            f"  if (inner == 1) {{\n"
            f"    k{i}_reduce_rows<<<(unsigned)outer, {threads}, 0, km_stream()>>>(x, y, R);\n"
            f"  }} else {{\n"
            f"    int64_t n = outer * inner;\n"
            f"    k{i}_reduce_cols<<<(unsigned)((n + 255) / 256), 256, 0, km_stream()>>>(x, y, outer, R, inner);\n"
            f"  }}\n{LAUNCH_CHECK}}}\n")


def softmax(i: int, step, bug: str, threads: int) -> str:
    """Softmax / log-softmax along R of a contiguous [outer, R, inner] view."""
    log = step.args["log"]
    rb = "R - 1" if bug == "off_by_one" else "R"
    sum_fn = "km_block_sum_nosync" if bug == "missing_sync" else "km_block_sum"
    write_row = ("yr[r] = xr[r] - mx - logf(s);" if log else "yr[r] = expf(xr[r] - mx) * inv;")
    write_col = ("y[b + r * inner] = x[b + r * inner] - mx - logf(s);" if log
                 else "y[b + r * inner] = expf(x[b + r * inner] - mx) * inv;")
    sum_loop = (f"  for (int64_t r = threadIdx.x; r < {rb}; r += blockDim.x) s += expf(xr[r] - mx);\n"
                if bug != "missing_bounds_check" else
                "  for (int64_t r0 = 0; r0 < R; r0 += blockDim.x) s += expf(xr[r0 + threadIdx.x] - mx);\n")
    col_base = "(o * R) * inner + j" if bug != "wrong_stride" else "o * R + j"
    return (f"__global__ void k{i}_softmax_rows(const float* __restrict__ x, float* __restrict__ y, int64_t R) {{\n"
            f"  __shared__ float sh[33];\n"
            f"  const float* xr = x + (int64_t)blockIdx.x * R;\n"
            f"  float* yr = y + (int64_t)blockIdx.x * R;\n"
            f"  float mx = -INFINITY;\n"
            f"  for (int64_t r = threadIdx.x; r < R; r += blockDim.x) mx = fmaxf(mx, xr[r]);\n"
            f"  mx = km_block_max(mx, sh);\n"
            f"  float s = 0.0f;\n{sum_loop}"
            f"  s = {sum_fn}(s, sh);\n"
            f"  const float inv = 1.0f / s;\n"
            f"  for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {write_row}\n}}\n\n"
            f"__global__ void k{i}_softmax_cols(const float* __restrict__ x, float* __restrict__ y, int64_t outer, int64_t R, int64_t inner) {{\n"
            f"  int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"  if (t >= outer * inner) return;\n"
            f"  int64_t o = t / inner, j = t % inner, b = {col_base};\n"
            f"  float mx = -INFINITY;\n"
            f"  for (int64_t r = 0; r < R; ++r) mx = fmaxf(mx, x[b + r * inner]);\n"
            f"  float s = 0.0f;\n"
            f"  for (int64_t r = 0; r < {rb}; ++r) s += expf(x[b + r * inner] - mx);\n"
            f"  const float inv = 1.0f / s;\n"
            f"  for (int64_t r = 0; r < R; ++r) {write_col}\n}}\n\n"
            f"static void run_k{i}(const float* x, float* y, int64_t outer, int64_t R, int64_t inner) {{\n"
            f"  if (outer * inner == 0) return;\n"
            f"  if (inner == 1) {{\n"
            f"    k{i}_softmax_rows<<<(unsigned)outer, {threads}, 0, km_stream()>>>(x, y, R);\n"
            f"  }} else {{\n"
            f"    int64_t n = outer * inner;\n"
            f"    k{i}_softmax_cols<<<(unsigned)((n + 255) / 256), 256, 0, km_stream()>>>(x, y, outer, R, inner);\n"
            f"  }}\n{LAUNCH_CHECK}}}\n")


def layernorm(i: int, step, bug: str, threads: int) -> str:
    """Layer norm of each contiguous row of N elements; w/b may be null (no affine)."""
    rb = "N - 1" if bug == "off_by_one" else "N"
    sum_fn = "km_block_sum_nosync" if bug == "missing_sync" else "km_block_sum"
    mean_loop = (f"  for (int64_t c = threadIdx.x; c < {rb}; c += blockDim.x) s += xr[c];\n"
                 if bug != "missing_bounds_check" else
                 "  for (int64_t c0 = 0; c0 < N; c0 += blockDim.x) s += xr[c0 + threadIdx.x];\n")
    return (f"__global__ void k{i}_layernorm(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,\n"
            f"                              float* __restrict__ y, int64_t N, float eps) {{\n"
            f"  __shared__ float sh[33];\n"
            f"  const float* xr = x + (int64_t)blockIdx.x * N;\n"
            f"  float* yr = y + (int64_t)blockIdx.x * N;\n"
            f"  float s = 0.0f;\n{mean_loop}"
            f"  const float mean = {sum_fn}(s, sh) / (float)N;\n"
            f"  float q = 0.0f;\n"
            f"  for (int64_t c = threadIdx.x; c < N; c += blockDim.x) {{ float d = xr[c] - mean; q += d * d; }}\n"
            f"  const float rstd = rsqrtf(km_block_sum(q, sh) / (float)N + eps);\n"
            f"  for (int64_t c = threadIdx.x; c < N; c += blockDim.x) {{\n"
            f"    float v = (xr[c] - mean) * rstd;\n"
            f"    if (w) v *= w[c];\n"
            f"    if (b) v += b[c];\n"
            f"    yr[c] = v;\n  }}\n}}\n\n"
            f"static void run_k{i}(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t N, float eps) {{\n"
            f"  if (rows == 0) return;\n"
            f"  k{i}_layernorm<<<(unsigned)rows, {threads}, 0, km_stream()>>>(x, w, b, y, N, eps);\n"
            f"{LAUNCH_CHECK}}}\n")


def matmul(i: int, step, bug: str, tile: int) -> str:
    """Shared-memory tiled C = alpha * A @ B + beta * bias; batch on grid.z."""
    kb = "a.K - 1" if bug == "off_by_one" else "a.K"
    load_a = f"(row < a.M && ka < {kb}) ? A[row * a.sam + ka * a.sak] : 0.0f"
    load_b = f"(kk < {kb} && col < a.N) ? B[kk * a.sbk + col * a.sbn] : 0.0f"
    if bug == "missing_bounds_check":
        load_a = "A[row * a.sam + ka * a.sak]"
        load_b = "B[kk * a.sbk + col * a.sbn]"
    if bug == "wrong_stride":
        load_b = f"(kk < {kb} && col < a.N) ? B[kk * a.sbn + col * a.sbk] : 0.0f"
    sync1 = "" if bug == "missing_sync" else "    __syncthreads();\n"
    store_guard = "" if bug == "missing_bounds_check" else "  if (row >= a.M || col >= a.N) return;\n"
    return (f"#define K{i}_TILE {tile}\n"
            f"__global__ void k{i}_matmul(KMMatmulArgs a, float* __restrict__ c) {{\n"
            f"  __shared__ float As[K{i}_TILE][K{i}_TILE + 1];\n"
            f"  __shared__ float Bs[K{i}_TILE][K{i}_TILE + 1];\n"
            f"  const int tx = threadIdx.x, ty = threadIdx.y;\n"
            f"  const int64_t row = (int64_t)blockIdx.y * K{i}_TILE + ty;\n"
            f"  const int64_t col = (int64_t)blockIdx.x * K{i}_TILE + tx;\n"
            f"  const float* A = a.a + (int64_t)blockIdx.z * a.sab;\n"
            f"  const float* B = a.b + (int64_t)blockIdx.z * a.sbb;\n"
            f"  float acc = 0.0f;\n"
            f"  for (int64_t t0 = 0; t0 < a.K; t0 += K{i}_TILE) {{\n"
            f"    const int64_t ka = t0 + tx, kk = t0 + ty;\n"
            f"    As[ty][tx] = {load_a};\n"
            f"    Bs[ty][tx] = {load_b};\n"
            f"{sync1}"
            f"    #pragma unroll\n"
            f"    for (int k = 0; k < K{i}_TILE; ++k) acc += As[ty][k] * Bs[k][tx];\n"
            f"    __syncthreads();\n  }}\n"
            f"{store_guard}"
            f"  float v = a.alpha * acc;\n"
            f"  if (a.bias) v += a.beta * a.bias[row * a.sbias_m + col * a.sbias_n];\n"
            f"  c[(int64_t)blockIdx.z * a.M * a.N + row * a.N + col] = v;\n}}\n\n"
            f"static void run_k{i}(const KMMatmulArgs& a, float* c) {{\n"
            f"  if (a.M * a.N * a.batch == 0) return;\n"
            f"  dim3 block(K{i}_TILE, K{i}_TILE);\n"
            f"  dim3 grid((unsigned)((a.N + K{i}_TILE - 1) / K{i}_TILE), (unsigned)((a.M + K{i}_TILE - 1) / K{i}_TILE), (unsigned)a.batch);\n"
            f"  k{i}_matmul<<<grid, block, 0, km_stream()>>>(a, c);\n"
            f"{LAUNCH_CHECK}}}\n")
