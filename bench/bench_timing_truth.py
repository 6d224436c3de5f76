"""Timing agreement: the verifier's speedups against triton's ``do_bench`` on the same machine (GPU).

    PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 python bench/bench_timing_truth.py [--kernelbench DIR] [--repeats 5]

Honest kernels of several kinds (scalar and float4 elementwise, a reduction, softmax, layernorm, a tiled
matmul, a fused chain, a kernel on the current stream, a launch-bound multi-op reference from KernelBench's
few-shot pairs, small and large inputs) are verified ``--repeats`` times with ``verify_batch`` (the
reference re-timed each repeat in its own process); then each candidate and its reference are timed with
``triton.testing.do_bench`` (L2 flushed, median) in a fresh process that loads the same prebuilt
extension. Prints a table: verifier device time, launch-inclusive time, eager time, speedup (verifier
median of repeats) against do_bench's speedup, their ratio, and the coefficient of variation of the
verifier's candidate time and speedup over the repeats. Writes ``<out>/timing_truth_<device>.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import emit  # noqa: E402

VEC4_RELU = r'''
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void relu4_kernel(const float4* __restrict__ x, float4* __restrict__ y, long n4) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) { float4 v = x[i]; v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f);
                  v.w = fmaxf(v.w, 0.f); y[i] = v; }
}
__global__ void relu_tail_kernel(const float* x, float* y, long start, long n) {
    long i = start + (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);
}
torch::Tensor relu_vec4(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel(), n4 = n / 4;
    auto stream = at::cuda::getCurrentCUDAStream();
    if (n4) relu4_kernel<<<(n4 + 255) / 256, 256, 0, stream>>>((const float4*)x.data_ptr<float>(),
                                                               (float4*)y.data_ptr<float>(), n4);
    if (n - 4 * n4) relu_tail_kernel<<<1, 256, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), 4 * n4, n);
    return y;
}
'''
VEC4_CANDIDATE = f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
CUDA_SRC = r"""{VEC4_RELU}"""
ext = load_inline(name="relu_vec4", cpp_sources="torch::Tensor relu_vec4(torch::Tensor x);", cuda_sources=CUDA_SRC,
                  functions=["relu_vec4"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_vec4(x.contiguous())
'''

DOBENCH_CHILD = r'''
import json, sys, tempfile, types, torch
from pathlib import Path
import torch.utils.cpp_extension as cpp
from triton.testing import do_bench
from verifier.child.loading import make_prebuilt_load_inline
from verifier.common.inputs import build_model, draw_inputs
job = json.loads(open(sys.argv[1]).read())
cpp.load_inline = make_prebuilt_load_inline(job["build_root"], False, [])
def load(name, code):
    m = types.ModuleType(name); exec(compile(code, name, "exec"), m.__dict__); return m
ref = load("ref", job["task"]); cand = load("cand", job["cand"])
model, init = build_model(ref, 1, "cuda", job["task"])
torch.manual_seed(1)
new = cand.ModelNew(*init).cuda().eval()
inputs = draw_inputs(ref.get_inputs, 7, "cuda", job["task"])
with torch.no_grad():
    out = {}
    for _ in range(2):  # the second round is the one reported (clocks up, caches warm)
        out["eager_us"] = do_bench(lambda: model(*inputs), return_mode="median") * 1e3
        out["cand_us"] = do_bench(lambda: new(*inputs), return_mode="median") * 1e3
print("RESULT " + json.dumps(out))
'''


def cases(kb_dir: str | None) -> list[tuple[str, str, str]]:
    """(name, reference program, candidate program)."""
    from bench.lib.teacher_coverage import family_tasks
    from synth.teacher.writer import write_candidate
    from bench.lib import fixtures as fx

    want = {"activation_relu": "scalar relu (teacher)", "reduce_sum_dim": "reduction", "softmax": "softmax",
            "layernorm": "layernorm", "matmul_tiled": "tiled matmul", "linear_bias_relu": "matmul+bias+relu",
            "fused_elementwise": "fused chain", "binary_broadcast": "broadcast add", "unary_silu": "silu"}
    out = []
    for fam, _name, code in family_tasks():
        if fam in want:
            out.append((want[fam], code, write_candidate(code, "cuda")))
    out.append(("scalar relu 2048x4096 (large)", fx.CUDA_RELU_TASK, fx.cuda_relu_candidate(0)))
    out.append(("float4 relu, current stream", fx.CUDA_RELU_TASK, VEC4_CANDIDATE))
    if kb_dir:
        fs = Path(kb_dir) / "src" / "kernelbench" / "prompts" / "few_shot"
        for stem, label in (("add", "KB add 1x128 (small)"), ("fuse_gelu", "KB fused gelu"),
                            ("tiled_matmul", "KB tiled matmul"), ("flash_attn", "KB attention (launch-bound ref)")):
            t, c = fs / f"model_ex_{stem}.py", fs / f"model_new_ex_{stem}.py"
            if t.is_file() and c.is_file():
                out.append((label, t.read_text(), c.read_text()))
    return out


def do_bench_times(task: str, cand: str, build_root: str) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"task": task, "cand": cand, "build_root": build_root}, f)
    r = subprocess.run([sys.executable, "-c", DOBENCH_CHILD, f.name], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": (r.stderr or r.stdout)[-400:]}


def cv(xs: list[float]) -> float:
    return statistics.pstdev(xs) / statistics.mean(xs) if len(xs) > 1 and statistics.mean(xs) else 0.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernelbench", default=os.environ.get("KM_KERNELBENCH", ""))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    ap.add_argument("--budget-s", type=float, default=540)
    args = ap.parse_args(argv)
    import torch

    from verifier import engine, runs as verifier_runs
    from kernelmill.schema import Candidate, Task

    t_start = time.time()
    build_root = tempfile.mkdtemp(prefix="km-truth-builds-")
    # prep_cache off: each repeat must time the reference again, not read the first repeat's kept timing
    cfg = engine.VerifyConfig(build_dir=build_root, exec_workers=4, timing_trials=30, time_torch_compile=False,
                           prep_cache=False)
    items, names = [], []
    for name, task_code, cand_code in cases(args.kernelbench or None):
        task = Task.from_code(task_code, name=name, source="teacher")
        items.append((task, Candidate(candidate_id=Candidate.make_id(task.task_id, "cuda", cand_code),
                                      task_id=task.task_id, backend="cuda", generator="bench", code=cand_code)))
        names.append(name)
    runs, last = [], 0.0
    for r in range(args.repeats):
        # a repeat starts only if it (as long as the last one) still leaves a sixth of the budget for do_bench
        if r and time.time() - t_start + last > args.budget_s * 0.83:
            break
        t_rep = time.time()
        verifier_runs._REF_TIMINGS.clear()  # each repeat times the reference again, in a fresh process
        runs.append(engine.verify_batch(items, config=cfg))
        last = time.time() - t_rep
        print(f"repeat {r + 1}: {time.time() - t_start:.0f} s", flush=True)
    device = torch.cuda.get_device_name(0)
    lines = [f"# Timing agreement: verifier vs triton do_bench", "",
             f"device: {device}; torch {torch.__version__}; command: `PYTHONPATH=. python bench/bench_timing_truth.py "
             f"--kernelbench <KernelBench checkout> --repeats {args.repeats}`; {len(runs)} verifier repeats, "
             f"timing_trials {cfg.timing_trials}", "",
             "| kernel | status | device us | launch-incl. us | eager us | speedup (verifier) | speedup (do_bench) | "
             "ratio | CV cand time | CV speedup | timings not alone |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    ratios, cvs = [], []
    for i, (name, (task, cand)) in enumerate(zip(names, items)):
        vs = [run[i] for run in runs]
        ok = [v for v in vs if v.status == "pass" and v.runtime_us and v.speedup_eager]
        if not ok:
            lines.append(f"| {name} | {vs[0].status} | - | - | - | - | - | - | - | - | - |")
            print(name, vs[0].status, vs[0].feedback[:500])
            continue
        db = do_bench_times(task.reference_code, cand.code, build_root) if time.time() - t_start < args.budget_s else {}
        rt = statistics.median(v.runtime_us for v in ok)
        sp = statistics.median(v.speedup_eager for v in ok)
        la = statistics.median(v.launch_us for v in ok if v.launch_us) if any(v.launch_us for v in ok) else None
        eg = statistics.median(v.eager_us for v in ok)
        c1, c2 = cv([v.runtime_us for v in ok]), cv([v.speedup_eager for v in ok])
        alone = sum(not v.versions.get("timing", {}).get("exclusive", True) for v in ok)  # device lock not held
        cvs.append(c1)
        if "cand_us" in db:
            dsp = db["eager_us"] / db["cand_us"]
            ratios.append(sp / dsp)
            lines.append(f"| {name} | pass | {rt:.1f} | {la or 0:.1f} | {eg:.1f} | {sp:.3f} | {dsp:.3f} "
                         f"({db['eager_us']:.1f} / {db['cand_us']:.1f} us) | {sp / dsp:.3f} | {c1:.1%} | {c2:.1%} | {alone} |")
        else:
            lines.append(f"| {name} | pass | {rt:.1f} | {la or 0:.1f} | {eg:.1f} | {sp:.3f} | "
                         f"{db.get('error', 'not run')[:80]!r} | - | {c1:.1%} | {c2:.1%} | {alone} |")
    within = sum(abs(r - 1) <= 0.10 for r in ratios)
    lines += ["", f"speedups within 10% of do_bench: {within}/{len(ratios)}; median CV of the candidate time over "
                  f"repeats: {statistics.median(cvs) if cvs else float('nan'):.1%}; wall {time.time() - t_start:.0f} s"]
    emit("\n".join(lines) + "\n", args.out, f"timing_truth_{re.sub(r'[^A-Za-z0-9]+', '_', device).strip('_')}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
