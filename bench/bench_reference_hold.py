"""What a task's reference timing holds the device alone for, task by task (GPU; the cpu backend runs too).

    PYTHONPATH=. python bench/bench_reference_hold.py PROBLEM.py [PROBLEM.py ...] [--backend cuda] [--out DIR]

Each problem file (a KernelBench-style program: Model, get_inputs, get_init_inputs) goes through the verifier's own
path for a task's reference timing, at the verifier's default settings, in a fresh build root (nothing kept from an
earlier run): ``verifier.engine.task_plan`` then ``verifier.runs.reference_timing`` (the reference's child, its
torch.compile built before the device lock, then the eager, null and compiled brackets that the trusted harness
clocks with the device held alone). Prints and writes (``reference_hold_<device>_<commit>.md``) one row per task:
the eager and compiled times per call, the seconds of each part of the exclusive hold
(``verifier/runs.py reference_hold``), the brackets per model and how many came late, and the task's wall.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import emit  # noqa: E402

PARTS = ("warm_device", "template", "reference_brackets", "null_brackets", "probes", "compile")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("problems", nargs="+", type=Path)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.problems if not p.is_file()]
    if missing:
        ap.error(f"no such problem file: {', '.join(missing)}")

    from verifier import runs
    from verifier.common.config import VerifyConfig
    from verifier.engine import task_plan

    cfg = VerifyConfig(build_dir=tempfile.mkdtemp(prefix="km-refhold-"), prep_cache=False)
    head = ["task", "eager us", "compiled us", "held s", *PARTS, "brackets (late): reference, null, compiled",
            "wall s"]
    rows = []
    for path in args.problems:
        t0 = time.perf_counter()
        plan = task_plan(path.read_text(), args.backend, cfg, path.stem)
        if plan.skip_reason or plan.task_fault:
            rows.append([path.stem, "-", "-", "-", *["-"] * len(PARTS), plan.skip_reason or plan.task_fault,
                         f"{time.perf_counter() - t0:.1f}"])
            continue
        timing = runs.reference_timing(plan, args.backend, cfg, cfg.build_root())
        wall = time.perf_counter() - t0
        held = timing.clocked.get("held") or {}
        parts = held.get("held_s") or {}
        us = lambda key: f"{timing.clocked[key] * 1e6:.1f}" if key in timing.clocked else "-"  # noqa: E731
        n, late = held.get("brackets") or {}, held.get("late") or {}
        rows.append([path.stem, us("eager_s"), us("compile_s"),
                     f"{sum(float(parts.get(k) or 0.0) for k in ('eager', 'compile')):.2f}",
                     *[f"{parts[k]:.3f}" if k in parts else "-" for k in PARTS],
                     ", ".join(f"{n.get(m, 0)} ({late.get(m, 0)})" for m in ("reference", "null", "compiled")),
                     f"{wall:.1f}"])
        print(" | ".join(rows[-1]), flush=True)
        if timing.report.timing_error or timing.report.setup_error:
            print(f"  {path.stem}: {(timing.report.timing_error or timing.report.setup_error)[-300:]}", flush=True)
    import torch

    device = torch.cuda.get_device_name(0) if args.backend == "cuda" else "cpu"
    commit = os.environ.get("KERNELMILL_VERIFIER_COMMIT", "unknown")
    lines = [f"# The reference timing's exclusive hold on {device}", "",
             f"Command: `PYTHONPATH=. python bench/bench_reference_hold.py {' '.join(p.name for p in args.problems)} "
             f"--backend {args.backend}` at {commit}; torch {torch.__version__}. The verifier's default settings, a "
             "fresh build root, no kept timing. `held s`: the reference child's exclusive phases (eager + compile); "
             "the parts are verifier/runs.py reference_hold's.", "",
             "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    emit("\n".join(lines) + "\n", args.out, f"reference_hold_{device.replace(' ', '_')}_{commit}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
