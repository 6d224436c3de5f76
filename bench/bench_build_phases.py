"""Where a candidate's build seconds go: each compile command of the verifier's first build variant (the
binding file main.cpp, the CUDA file cuda.cu, the link), run alone and timed, and nvcc's own phase times
(``nvcc --time``) for the CUDA file. On a GPU box:
    PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 python3 bench/bench_build_phases.py --per-task 1 --out bench/results
Without a GPU (torch's CPU build, nvcc present) add ``--cuda-home /usr/local/cuda``: the compiles and nvcc's phases
are timed the same way, the link fails (no libtorch_cuda). Prints a table (bench/results/build_phases_<device>.md)."""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import device_name, emit  # noqa: E402
from bench.lib.mixed_batch import mixed_batch  # noqa: E402
from bench.lib.testbed import load_manifest, real_batch  # noqa: E402
from verifier.build.objcache import MODULE  # noqa: E402
from verifier.build.pch import ensure_pch  # noqa: E402
from verifier.build.slim import SLIM_HEADER  # noqa: E402
from verifier.build.split import HOST_OBJECT  # noqa: E402
from verifier.build.steps import write_variant  # noqa: E402
from verifier.build.variants import build_variants  # noqa: E402
from verifier.common.config import VerifyConfig  # noqa: E402
from verifier.common.spec import canonical_spec  # noqa: E402
from verifier.front.static import StaticScanError, scan  # noqa: E402


def command(build_dir: Path, target: str) -> str:
    return subprocess.run(["ninja", "-t", "commands", "-s", target], cwd=build_dir, capture_output=True, text=True,
                          check=True).stdout.strip()


def timed(cmd: str, cwd: Path) -> tuple[float, bool, str]:
    t = time.perf_counter()
    r = subprocess.run(cmd, shell=True, cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - t, r.returncode == 0, (r.stdout + r.stderr)[-800:]


def _phase_ms(rec: list[str]) -> float:
    """A row of ``nvcc --time``'s CSV: milliseconds in the last column (older nvcc) or before a unit column (nvcc 13:
    ``..., tool, metric, unit``)."""
    vals = [v.strip() for v in rec]
    return float(vals[-2] if vals[-1] == "ms" else vals[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-task", type=int, default=1)
    ap.add_argument("--tasks", default="", help="comma-separated task names of bench/lib/mixed_batch.py (default: all)")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--manifest", default="", help="ext/testbed/manifest.jsonl: the real batch's candidates "
                    "(bench/lib/testbed.py real_batch: --n-tasks tasks, --per-task each), not the mixed batch's")
    ap.add_argument("--n-tasks", type=int, default=12)
    ap.add_argument("--cuda-home", default="", help="where nvcc lives, for a CPU build of torch (which leaves "
                    "cpp_extension's CUDA_HOME None): the compiles run, the link against libtorch_cuda fails")
    a = ap.parse_args()
    if a.cuda_home:
        import torch.utils.cpp_extension as ce
        ce.CUDA_HOME = a.cuda_home
    items = list(real_batch(load_manifest(Path(a.manifest)), per_task=a.per_task, n_tasks=a.n_tasks).items) \
        if a.manifest else [it for it in mixed_batch(a.per_task)
                            if not a.tasks or it[1].candidate_id.rsplit("-", 1)[0] in a.tasks.split(",")]
    rows, phases = [], defaultdict(list)
    for task, cand in items:
        try:  # a model's answer that is no program has no build
            sp = [e.args for e in scan(cand.code, 'cuda').extensions if e.resolved]
        except StaticScanError:
            continue
        if not sp:
            continue
        spec = canonical_spec(sp[0])
        label, kwargs = build_variants(spec)[0]
        pch, slim = (ensure_pch(spec, VerifyConfig().pch_root(), *h) for h in ((), (SLIM_HEADER,)))
        d = Path(tempfile.mkdtemp(prefix="km-phases-"))
        write_variant("km_phase_probe", d, kwargs, pch, slim)  # the compile pool's own build files
        units = [("main.o", "binding main.cpp"), ("cuda.cuda.o", "cuda.cu")]
        if kwargs.get("host_source") is not None:  # the split variant's host unit (verifier/build/split.py)
            units.insert(1, (HOST_OBJECT, "host unit"))
        row = {"candidate": cand.candidate_id, "variant": label}
        for obj, tu in units:
            cmd = command(d, obj)
            if tu == "cuda.cu":
                cmd += f" --time {d / 'nvcc_time.csv'}"
            s, ok, tail = timed(cmd, d)
            row[tu] = f"{s:.1f}" + ("" if ok else " (failed)")
            if not ok:
                print(cand.candidate_id, tu, "FAILED", tail, flush=True)
        link = command(d, f"{MODULE}.so")
        s, ok, _ = timed(link, d)
        row["link"] = f"{s:.1f}" + ("" if ok else " (failed)")
        try:
            with open(d / "nvcc_time.csv") as f:
                for rec in csv.reader(f):
                    if len(rec) >= 4 and rec[0].strip() and rec[0].strip() != "source file name":
                        phases[rec[1].strip()].append(_phase_ms(rec) / 1000.0)
        except (OSError, ValueError):
            pass
        rows.append(row)
        print(json.dumps(row), flush=True)
    cols = ["candidate", "variant", "binding main.cpp", "host unit", "cuda.cu", "link"]
    table = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n" + "\n".join(
        "| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows)
    ptable = "| nvcc phase | mean s | n |\n|---|---|---|\n" + "\n".join(
        f"| {k} | {sum(v) / len(v):.2f} | {len(v)} |" for k, v in sorted(phases.items(), key=lambda kv: -sum(kv[1])) if v)
    text = (f"# Build phases on {device_name()}\n\nCommand: `PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 python3 bench/"
            f"bench_build_phases.py --per-task {a.per_task} --tasks '{a.tasks}'`; each command run alone, seconds of wall "
            "time; each unit against its precompiled header where there is one.\n\n" + table + "\n\n" + ptable + "\n")
    emit(text, a.out, f"build_phases_{device_name().replace(' ', '_')}.md")


if __name__ == "__main__":
    main()
