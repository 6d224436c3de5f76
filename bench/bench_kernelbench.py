"""KernelBench through the verifier's reference path (GPU; the cpu backend runs what fits).

    PYTHONPATH=. python bench/bench_kernelbench.py KERNELBENCH_DIR [--levels 1,2,3] [--backend cuda] [--budget-s 540]

For every program of the chosen levels (a checkout of ScalingIntelligence/KernelBench: its ``KernelBench/
levelN`` folders, loaded with ``graphs.kernelbench.load_task_file``, the loader behind ``kernelmill load``),
the verifier's own path for a task: ``verifier.engine.task_plan`` (input size from meta tensors, a clear skip
when the task does not fit the machine, reproducibility of ``get_inputs`` from a seed, the extra-shape
probe), then the reference model built from the init seed and run on two trials whose inputs are drawn on
the device from their seeds (no input ever goes through a file). Prints and writes a table: per level,
how many ran, were skipped (with reasons) or failed (with reasons), peak host RSS and device memory,
seconds per task; the slowest and largest tasks by name.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import signal
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import emit  # noqa: E402


class Timeout(Exception):
    pass


def _rss_gb() -> tuple[float, float]:
    """(current, peak) resident memory of this process in GiB."""
    cur = peak = 0.0
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            cur = int(line.split()[1]) / 2**20
        elif line.startswith("VmHWM:"):
            peak = int(line.split()[1]) / 2**20
    return cur, peak


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kernelbench")
    ap.add_argument("--levels", default="1,2,3")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--per-task-s", type=float, default=60)
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    import torch

    from graphs.kernelbench import load_task_file
    from verifier.engine import VerifyConfig, task_plan
    from verifier.common.inputs import build_model, draw_inputs
    from verifier.judge.verdict import as_list

    cfg = VerifyConfig()
    device = "cuda" if args.backend == "cuda" else "cpu"
    t_start = time.time()
    rows = []  # (level, name, outcome, reason, seconds, device_gb, input_gb)

    def on_alarm(*_):
        raise Timeout()

    signal.signal(signal.SIGALRM, on_alarm)
    files = []
    for lv in args.levels.split(","):
        files += sorted((Path(args.kernelbench) / "KernelBench" / f"level{lv}").glob("*.py"),
                        key=lambda p: int(re.match(r"(\d+)", p.name).group(1)) if re.match(r"\d+", p.name) else 0)
    for f in files:
        level = f.parent.name
        if time.time() - t_start > args.budget_s:
            rows.append((level, f.stem, "not reached", "benchmark time budget", 0.0, 0.0, 0.0))
            continue
        t0 = time.time()
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        outcome, reason, in_gb = "ran", "", 0.0
        signal.alarm(int(args.per_task_s))
        try:
            task = load_task_file(f)
            code = task.reference_code if hasattr(task, "reference_code") else f.read_text()
            plan = task_plan(code, args.backend, cfg, f.name)
            in_gb = (plan.input_bytes or 0) / 2**30
            if plan.skip_reason:
                outcome, reason = "skipped", plan.skip_reason
            else:
                with torch.no_grad():
                    model, _ = build_model(plan.ref_mod, 1234, device, code)
                    for seed in (11, 12):
                        out = as_list(model(*draw_inputs(plan.ref_mod.get_inputs, seed, device, code)))
                        del out
                    del model
                if not plan.reproducible:
                    reason = "inputs not reproducible from a seed: shipped as files"
        except Timeout:
            outcome, reason = "failed", f"over {args.per_task_s:.0f} s"
        except Exception as e:  # noqa: BLE001 - the table names every failure
            outcome, reason = "failed", f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
        finally:
            signal.alarm(0)
        dev_gb = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
        if device == "cuda":
            torch.cuda.empty_cache()
        rows.append((level, f.stem, outcome, reason, time.time() - t0, dev_gb, in_gb))
        print(f"{level}/{f.stem}: {outcome} {reason} {time.time() - t0:.1f}s dev {dev_gb:.1f} GiB", flush=True)
    _, host_peak = _rss_gb()
    dev_name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    lines = ["# KernelBench through the verifier's reference path", "",
             f"device: {dev_name}; torch {torch.__version__}; command: `PYTHONPATH=. python bench/bench_kernelbench.py "
             f"<KernelBench checkout> --levels {args.levels} --backend {args.backend}`; wall {time.time() - t_start:.0f} s; "
             f"peak host RSS of the run {host_peak:.1f} GiB", "",
             "| level | programs | ran | skipped | failed | not reached | median s/task | max s/task | peak device GiB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    by_level = collections.defaultdict(list)
    for r in rows:
        by_level[r[0]].append(r)
    for lv, rs in sorted(by_level.items()):
        done = [r for r in rs if r[2] != "not reached"]
        secs = [r[4] for r in done] or [0.0]
        lines.append(f"| {lv} | {len(rs)} | {sum(r[2] == 'ran' for r in rs)} | {sum(r[2] == 'skipped' for r in rs)} | "
                     f"{sum(r[2] == 'failed' for r in rs)} | {sum(r[2] == 'not reached' for r in rs)} | "
                     f"{statistics.median(secs):.2f} | {max(secs):.1f} | {max((r[5] for r in rs), default=0):.1f} |")
    lines += ["", "Failed and skipped, with reasons:", ""]
    lines += [f"- {r[0]}/{r[1]}: {r[2]}: {r[3]}" for r in rows if r[2] in ("failed", "skipped")] or ["- none"]
    notes = [r for r in rows if r[2] == "ran" and r[3]]
    if notes:
        lines += ["", "Ran, with a note:", ""] + [f"- {r[0]}/{r[1]}: {r[3]}" for r in notes]
    lines += ["", "Slowest:", ""] + [f"- {r[0]}/{r[1]}: {r[4]:.1f} s, device peak {r[5]:.1f} GiB, inputs {r[6]:.2f} GiB"
                                    for r in sorted(rows, key=lambda r: -r[4])[:8]]
    emit("\n".join(lines) + "\n", args.out, f"kernelbench_reference_{re.sub(r'[^A-Za-z0-9]+', '_', dev_name).strip('_')}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
