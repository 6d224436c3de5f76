"""What model-written answers take from PyTorch's compute libraries by name: the fidelity check of the C01
allowlist (verifier/front/binary.py ``TORCH_IMPORT_ALLOWED``). For each solution of a test-bed manifest
(bench/testbed_build.py; default the answers that passed on a GPU), each ``load_inline`` spec's two translation
units are compiled as the verifier's full build writes them (no link, nothing runs), and every undefined symbol
of the objects is classified as the binary scan classifies the built module's imports. An honest answer with a
flagged symbol is a false C01.

    PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 python3 -m bench.lib.torch_imports --manifest ext/testbed/manifest_pass.jsonl --jobs 14

(A module of the harness package, run with ``-m``: bench/*.py stays under its line cap, tests/test_layers_bench.py.)

On a machine without a GPU (torch's CPU build, nvcc present) add ``--cuda-home /usr/local/cuda``: the objects
compile the same; libtorch_cuda is not loaded, so its names are judged by namespace only.
Prints a markdown table (and writes bench/results/torch_imports_<device>.md)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")  # what the verifier builds for on an H100 / H200

import torch  # noqa: E402,F401 - PyTorch's libraries loaded: imports resolve against them

from bench.common import device_name, emit  # noqa: E402
from verifier.build.pch import write_build_files  # noqa: E402
from verifier.build.variants import build_variants  # noqa: E402
from verifier.common.spec import canonical_spec  # noqa: E402
from verifier.front import binary  # noqa: E402
from verifier.front.static import scan  # noqa: E402


def _objects(spec: dict, budget_s: float) -> tuple[list[Path], list[str], Path]:
    """The spec's objects compiled as the full build writes them: (objects, failures, directory)."""
    _, kwargs = build_variants(canonical_spec(spec))[-1]
    d = Path(tempfile.mkdtemp(prefix="km-imports-"))
    write_build_files(d, "km_imports", verbose=False, **kwargs)
    objs, failed = [], []
    for obj in ("main.o", "cuda.cuda.o"):
        cmd = subprocess.run(["ninja", "-t", "commands", "-s", obj], cwd=d, capture_output=True, text=True).stdout.strip()
        if not cmd:
            continue
        try:
            r = subprocess.run(cmd, shell=True, cwd=d, capture_output=True, text=True, timeout=budget_s)
            ok = r.returncode == 0 and (d / obj).is_file()
        except subprocess.TimeoutExpired:
            ok = False
        (objs if ok else failed).append(d / obj if ok else obj)
    return objs, failed, d


def one(row: dict, budget_s: float) -> dict:
    sol = ROOT / "ext" / "testbed" / "solutions" / f"{row['id']}.py"
    out = {"id": row["id"], "objects": 0, "failed": [], "flagged": [], "torch": []}
    try:
        specs = [e.args for e in scan(sol.read_text(errors="replace"), "cuda").extensions if e.resolved]
    except (OSError, SyntaxError, ValueError) as e:
        out["failed"].append(f"scan: {e}")
        return out
    for spec in specs:
        try:
            objs, failed, d = _objects(spec, budget_s)
        except Exception as e:  # noqa: BLE001 - torch's build-file writer refusing a spec: reported, not fatal
            out["failed"].append(f"build files: {type(e).__name__}: {str(e)[:120]}")
            continue
        out["objects"] += len(objs)
        out["failed"] += failed
        for o in objs:
            names = subprocess.run(["nm", "-u", "--format=just-symbols", str(o)], capture_output=True,
                                   text=True).stdout.split()
            for n in set(names):
                lib = binary.taken_from_torch(n.encode())
                if lib:
                    out["flagged"].append(f"{n} ({lib})")
                elif binary._defined_in(n.encode()).startswith("libtorch") or binary._TORCH_NAMESPACE.match(n.encode()):
                    out["torch"].append(n)
        shutil.rmtree(d, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--manifest", default=str(ROOT / "ext" / "testbed" / "manifest_pass.jsonl"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=0, help="stop starting new solutions after this long (0: none)")
    ap.add_argument("--cuda-home", default="", help="where nvcc lives, for a CPU build of torch")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args()
    if a.cuda_home:
        import torch.utils.cpp_extension as ce
        ce.CUDA_HOME = a.cuda_home
    rows = [json.loads(x) for x in open(a.manifest) if x.strip()]
    rows = rows[:a.limit] if a.limit else rows
    t0 = time.monotonic()

    def run(r):
        if a.budget_s and time.monotonic() - t0 > a.budget_s:
            return {"id": r["id"], "skipped": True}
        return one(r, 300.0)

    with ThreadPoolExecutor(a.jobs) as ex:
        results = list(ex.map(run, rows))
    done = [r for r in results if not r.get("skipped")]
    flagged = [r for r in done if r["flagged"]]
    allowed = Counter(n for r in done for n in set(r["torch"]))
    lines = [f"# What model-written answers take from PyTorch's libraries ({device_name()})", "",
             f"Command: `PYTHONPATH=. python3 -m bench.lib.torch_imports --manifest {Path(a.manifest).name} "
             f"--jobs {a.jobs}`; torch {torch.__version__}. Each spec's main.cpp and cuda.cu compiled as the full "
             "build writes them (no link); every undefined symbol classified by verifier/front/binary.py "
             "`taken_from_torch`.", "",
             "| solutions | compiled (objects) | not reached | objects that failed | flagged (false C01 if honest) |",
             "| --- | --- | --- | --- | --- |",
             f"| {len(rows)} | {len(done)} ({sum(r['objects'] for r in done)}) | {len(results) - len(done)} | "
             f"{sum(len(r['failed']) for r in done)} | {len(flagged)} |", ""]
    if flagged:
        lines += ["## Flagged", "", "| solution | symbols |", "| --- | --- |"]
        lines += [f"| {r['id']} | {', '.join(sorted(set(r['flagged']))[:4])} |" for r in flagged]
        lines.append("")
    dem = subprocess.run(["c++filt"], input="\n".join(allowed), capture_output=True, text=True).stdout.split("\n") \
        if shutil.which("c++filt") else list(allowed)
    names = dict(zip(allowed, dem))
    lines += ["## PyTorch names the answers import that the allowlist takes (solutions using each)", "",
              "| solutions | symbol |", "| --- | --- |"]
    lines += [f"| {n} | `{names.get(s, s)[:120]}` |" for s, n in allowed.most_common(40)]
    emit("\n".join(lines) + "\n", a.out, f"torch_imports_{device_name().replace(' ', '_')}.md")


if __name__ == "__main__":
    main()
