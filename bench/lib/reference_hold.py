"""What a task's reference timing holds the device alone for, task by task (GPU; the cpu backend runs too).

    PYTHONPATH=. python -m bench.lib.reference_hold PROBLEM.py [PROBLEM.py ...] [--backend cuda] [--out DIR]

``measure(paths, backend)`` sends each problem file (a KernelBench-style program: Model, get_inputs,
get_init_inputs) through the verifier's own path for a task's reference timing, at the verifier's default settings,
in a fresh build root (no kept timing): ``verifier.engine.task_plan``, then ``verifier.runs.reference_timing`` (the
reference's child, its torch.compile built before the device lock, then the eager, null and compiled brackets that
the trusted harness clocks with the device held alone). ``lines(rows, ...)`` is the markdown: one row per task (a program the verifier cannot run, or skips, a row saying why) with
the eager and compiled times per call, the seconds of each part of the exclusive hold (``verifier/runs.py
reference_hold``), the brackets per model and how many came late, and the task's wall; ``main`` prints it and
writes ``reference_hold_<device>_<commit>.md`` under ``--out`` (the commit from KERNELMILL_VERIFIER_COMMIT).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

PARTS = ("warm_device", "template", "reference_brackets", "null_brackets", "probes", "compile")
HEAD = ["task", "eager us", "compiled us", "held s", *PARTS, "brackets (late): reference, null, compiled", "wall s"]


def measure(paths: list[Path], backend: str, on_row=lambda row, why: None, cfg=None) -> list[list[str]]:
    """One row (``HEAD``'s cells) per problem file; ``on_row(row, why)`` as each ends (``why``: its timing error).
    ``cfg``: the VerifyConfig (default: the verifier's defaults in a fresh build root, nothing kept)."""
    from kernelmill.errors import InputError
    from verifier import runs
    from verifier.common.config import VerifyConfig
    from verifier.engine import task_plan

    cfg = cfg or VerifyConfig(build_dir=tempfile.mkdtemp(prefix="km-refhold-"), prep_cache=False)
    rows = []
    for path in paths:
        t0 = time.perf_counter()
        try:
            plan = task_plan(path.read_text(), backend, cfg, path.stem)
            why = plan.skip_reason or plan.task_fault
        except InputError as e:  # a program the verifier cannot run: its row says why, the others go on
            why = str(e)
        if why:
            rows.append([path.stem, *["-"] * (len(HEAD) - 3), why, f"{time.perf_counter() - t0:.1f}"])
            on_row(rows[-1], "")
            continue
        timing = runs.reference_timing(plan, backend, cfg, cfg.build_root())
        held = timing.clocked.get("held") or {}
        parts, n, late = held.get("held_s") or {}, held.get("brackets") or {}, held.get("late") or {}

        def us(key: str) -> str:
            return f"{timing.clocked[key] * 1e6:.1f}" if key in timing.clocked else "-"

        rows.append([path.stem, us("eager_s"), us("compile_s"),
                     f"{sum(float(parts.get(k) or 0.0) for k in ('eager', 'compile')):.2f}",
                     *[f"{parts[k]:.3f}" if k in parts else "-" for k in PARTS],
                     ", ".join(f"{n.get(m, 0)} ({late.get(m, 0)})" for m in ("reference", "null", "compiled")),
                     f"{time.perf_counter() - t0:.1f}"])
        on_row(rows[-1], timing.report.timing_error or timing.report.setup_error)
    return rows


def lines(rows: list[list[str]], *, device: str, command: str, commit: str, torch_version: str) -> list[str]:
    """The markdown of a run: what was measured and how, then one row per task."""
    return [f"# The reference timing's exclusive hold on {device}", "",
            f"Command: `{command}` at {commit}; torch {torch_version}. The verifier's default settings, a fresh build "
            "root, no kept timing. `held s`: the reference child's exclusive phases (eager + compile); the parts are "
            "verifier/runs.py reference_hold's.", "",
            "| " + " | ".join(HEAD) + " |", "|" + " --- |" * len(HEAD),
            *["| " + " | ".join(r) + " |" for r in rows]]


def main(argv=None) -> int:
    from bench.common import device_name, emit

    ap = argparse.ArgumentParser(prog="python -m bench.lib.reference_hold", description=__doc__.split("\n")[0])
    ap.add_argument("problems", nargs="+", type=Path)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).resolve().parents[1] / "results"))
    args = ap.parse_args(argv)
    if missing := [str(p) for p in args.problems if not p.is_file()]:
        ap.error(f"no such problem file: {', '.join(missing)}")
    rows = measure(args.problems, args.backend, lambda r, why: print(" | ".join(r), why[-300:], flush=True))
    import torch

    dev = device_name() if args.backend == "cuda" else "cpu"
    commit = os.environ.get("KERNELMILL_VERIFIER_COMMIT", "unknown")
    cmd = f"python -m bench.lib.reference_hold {' '.join(p.name for p in args.problems)} --backend {args.backend}"
    emit("\n".join(lines(rows, device=dev, command=cmd, commit=commit, torch_version=torch.__version__)) + "\n",
         args.out, f"reference_hold_{dev.replace(' ', '_')}_{commit}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
