"""nvcc seconds for one CUDA source built "light" (load_inline's implicit torch/types.h, torch/extension.h
removed) against "slim" (verifier/build/slim.py: only the headers the source needs). CPU-only: it compiles the
CUDA object of each source with the exact nvcc command load_inline would run (read from the ninja file
torch writes), one at a time, and prints a table. Sources: the KernelBench-style ReLU of the verifier
benchmark, the teacher's answers for the seed tasks (torch/extension.h, torch::empty, TORCH_CHECK), and an
AT_DISPATCH softmax.

    CUDA_HOME=/usr/local/cuda python3 bench/bench_slim_compile.py [--n-teacher 3] [--out bench/results]

Needs nvcc and a CUDA_HOME; no GPU (nothing is linked or run)."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import emit  # noqa: E402
from bench.lib import fixtures as fx  # noqa: E402
from verifier.build.slim import slim_source  # noqa: E402
from verifier.build.variants import HEAVY_INCLUDE  # noqa: E402

SOFTMAX_CU = r'''
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
template <typename scalar_t>
__global__ void row_softmax(const scalar_t* x, scalar_t* y, int cols) {
    const scalar_t* r = x + (long)blockIdx.x * cols; scalar_t* o = y + (long)blockIdx.x * cols;
    float m = -1e30f; for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, (float)r[j]);
    __shared__ float red[256]; red[threadIdx.x] = m; __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) { if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]); __syncthreads(); }
    m = red[0]; __syncthreads(); float sum = 0.f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) sum += expf((float)r[j] - m);
    red[threadIdx.x] = sum; __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) { if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s]; __syncthreads(); }
    for (int j = threadIdx.x; j < cols; j += blockDim.x) o[j] = (scalar_t)(expf((float)r[j] - m) / red[0]);
}
torch::Tensor softmax_cuda(torch::Tensor x) {
    TORCH_CHECK(x.dim() == 2, "2-D input");
    auto y = torch::empty_like(x);
    auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "row_softmax", [&] {
        row_softmax<scalar_t><<<x.size(0), 256, 0, stream>>>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), x.size(1));
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
'''


def nvcc_command(work: Path) -> tuple[list[str], list[str]]:
    """nvcc and its flags for a load_inline CUDA source (cuda_cflags + cuda_post_cflags of torch's ninja)."""
    import torch.utils.cpp_extension as ce

    class Stop(Exception):
        pass

    def stop(*_a, **_k):
        raise Stop

    work.mkdir(parents=True, exist_ok=True)
    if ce.CUDA_HOME is None:  # a CPU build of torch: point it at the toolkit that is there
        ce.CUDA_HOME = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    saved = ce._run_ninja_build
    ce._run_ninja_build = stop
    try:
        ce.load_inline(name="km_probe", cpp_sources=["int f();"], cuda_sources=["int f() { return 0; }"],
                       functions=["f"], extra_cuda_cflags=["-O3"], build_directory=str(work))
    except Stop:
        pass
    finally:
        ce._run_ninja_build = saved
    vals = {}
    for line in (work / "build.ninja").read_text().splitlines():
        k, sep, v = line.partition(" = ")
        if sep:
            vals[k] = v
    return shlex.split(vals["nvcc"]), shlex.split(vals.get("cuda_cflags", "") + " " + vals.get("cuda_post_cflags", ""))


def compile_seconds(nvcc, flags, source: str, work: Path, label: str) -> tuple[float, bool, str]:
    f = work / f"{label}.cu"
    f.write_text(source)
    t = time.perf_counter()
    r = subprocess.run([*nvcc, "-c", str(f), "-o", str(f.with_suffix(".o")), *flags], capture_output=True, text=True)
    return time.perf_counter() - t, r.returncode == 0, (r.stdout + r.stderr)[-1500:]


def teacher_sources(n: int) -> list[tuple[str, str]]:
    from synth.teacher.writer import write_candidate
    from verifier.front.static import scan

    out = []
    for p in sorted(Path("data/seed_tasks/level1").glob("*.py"))[: n * 3]:
        try:
            rep = scan(write_candidate(p.read_text(), "cuda"), "cuda")
        except Exception:  # noqa: BLE001 - the teacher declines some programs
            continue
        for ext in rep.extensions:
            cu = ext.args.get("cuda_sources")
            if ext.resolved and cu:
                out.append((f"teacher {p.stem}", "".join(cu) if isinstance(cu, list) else cu))
        if len(out) >= n:
            break
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-teacher", type=int, default=3)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="km-slim-"))
    nvcc, flags = nvcc_command(work / "probe")
    sources = [("KernelBench ReLU (bench/bench_verifier.py --style light)",
                fx.CUDA_RELU_TEMPLATE.format(k=1, thresh="0.0", threads=256)),
               ("AT_DISPATCH softmax + current stream", SOFTMAX_CU)] + teacher_sources(a.n_teacher)
    rows = []
    for i, (name, src) in enumerate(sources):
        light = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n" + HEAVY_INCLUDE.sub("", src)
        slim = slim_source(src)
        tl, okl, _ = compile_seconds(nvcc, flags, light, work, f"light{i}")
        if slim is None:
            rows.append((name, f"{tl:.1f}", "not eligible", "", ""))
        else:
            ts, oks, log = compile_seconds(nvcc, flags, slim, work, f"slim{i}")
            rows.append((name, f"{tl:.1f}" + ("" if okl else " (failed)"), f"{ts:.1f}" + ("" if oks else " (failed)"),
                         f"{tl / ts:.2f}x" if oks else "", ""))
            if not oks:
                print(log, file=sys.stderr)
        print(rows[-1], flush=True)
    import platform

    from verifier.common.backends import CpuBackend

    cpu = CpuBackend().describe()
    text = (f"# nvcc seconds per CUDA source: light vs slim (verifier/build/slim.py)\n\n`CUDA_HOME=/usr/local/cuda python3 "
            f"bench/bench_slim_compile.py --n-teacher {a.n_teacher}` on {cpu} ({os.cpu_count()} cores), "
            f"{platform.python_version()}, nvcc `{' '.join(nvcc)}`; one compile at a time, object only.\n\n"
            "| source | light s | slim s | speed-up |\n|---|---|---|---|\n"
            + "\n".join(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |" for r in rows) + "\n")
    emit(text, a.out, "slim_compile_cpu.md")


if __name__ == "__main__":
    main()
