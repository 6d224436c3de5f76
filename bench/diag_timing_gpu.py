"""Diagnosis on a GPU box: is a candidate's timed ReLU slower than eager because of the kernel, the launch
path, or because the verifier ran the torch profiler (own-kernel check) in the same process before timing?

    PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 python3 bench/diag_timing_gpu.py

Prints median microseconds (CUDA events, 50 calls, same input) for the candidate's extension function and
torch.relu, before and after one torch.profiler block."""

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.utils.cpp_extension import load_inline  # noqa: E402

from verifier import fixtures as fx  # noqa: E402


def median_us(fn, n=50):
    ts = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    return statistics.median(ts)


def main():
    ns = {}
    code = fx.cuda_relu_bare_candidate(7).split("class ModelNew")[0]
    exec(code.replace("from torch.utils.cpp_extension import load_inline", ""), {"load_inline": load_inline}, ns)
    ext = load_inline(name="diag_relu", cpp_sources=ns["CPP_SRC"], cuda_sources=ns["CUDA_SRC"],
                      functions=["relu_cuda"], extra_cuda_cflags=["-O3"], build_directory=tempfile.mkdtemp())
    x = torch.randn(2048, 4096, device="cuda")
    assert torch.equal(ext.relu_cuda(x), torch.relu(x))
    rows = [("candidate ext, before profiler", median_us(lambda: ext.relu_cuda(x))),
            ("torch.relu, before profiler", median_us(lambda: torch.relu(x)))]
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]):
        ext.relu_cuda(x)
        torch.cuda.synchronize()
    rows += [("candidate ext, after profiler", median_us(lambda: ext.relu_cuda(x))),
             ("torch.relu, after profiler", median_us(lambda: torch.relu(x)))]
    print(torch.cuda.get_device_name(0), torch.__version__)
    for k, v in rows:
        print(f"| {k} | {v:.1f} us |")


if __name__ == "__main__":
    main()
