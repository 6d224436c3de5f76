"""``kernelmill load`` of a KernelBench checkout on this machine: wall time, memory, loaded, skipped.

    PYTHONPATH=. python3 bench/bench_kernelbench_load.py ext/KernelBench/KernelBench --out /tmp/kbload \
        [--interrupt-after 60] [--results bench/results]

Runs ``/usr/bin/time -v kernelmill load KBDIR --out OUT`` (OUT emptied first) while sampling, every
0.2 s, the resident memory of the whole process tree (the CLI and its annotation workers) from
/proc; prints a table with the wall time, /usr/bin/time's maximum RSS (the largest single process),
the peak of the tree's sum, tasks loaded, failures by category and the slowest programs.
``--interrupt-after S`` first runs the same load under ``timeout S`` (SIGTERM: the process dies
without cleanup, the hardest case), then the full load into the same OUT, and reports what the
interrupted run had stored and what the rerun found already done. The KernelBench checkout is
given by path (fetch the public repository; never commit its files).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import emit  # noqa: E402


def _tree_rss_kb(root_pid: int) -> int:
    """Sum of VmRSS over ``root_pid`` and its descendants (kB)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            text = Path(f"/proc/{d}/status").read_text()
        except OSError:
            continue
        ppid = int(re.search(r"PPid:\s+(\d+)", text).group(1))
        m = re.search(r"VmRSS:\s+(\d+)", text)
        children.setdefault(ppid, []).append(int(d))
        rss[int(d)] = int(m.group(1)) if m else 0
    total, stack = 0, [root_pid]
    while stack:
        p = stack.pop()
        total += rss.get(p, 0)
        stack.extend(children.get(p, []))
    return total


def run_load(kbdir: str, out: str, timeout_s: float | None = None) -> dict:
    # timeout inside time: the SIGTERM goes to kernelmill itself, and time still reports
    cli = [shutil.which("kernelmill")] if shutil.which("kernelmill") else [sys.executable, "-m", "orchestrator.cli"]
    cmd = ["/usr/bin/time", "-v"] + (["timeout", str(timeout_s)] if timeout_s else []) + cli + ["load", kbdir, "--out", out]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]

    def sample():
        while proc.poll() is None:
            peak[0] = max(peak[0], _tree_rss_kb(proc.pid))
            time.sleep(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    stdout, stderr = proc.communicate()
    th.join()
    wall = time.perf_counter() - t0
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    counts = {}
    start = stdout.find("{")
    if start >= 0:
        try:
            counts = json.loads(stdout[start:stdout.rfind("}") + 1])
        except ValueError:
            counts = {}
    return {"rc": proc.returncode, "wall_s": wall, "max_rss_kb": int(m.group(1)) if m else 0,
            "tree_peak_kb": peak[0], "counts": counts, "stderr_tail": stderr[-2000:]}


def stored_rows(out: str) -> int:
    from kernelmill import store

    return len(store.stored_ids(out, "tasks")) if Path(out, "tasks").is_dir() else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kbdir")
    ap.add_argument("--out", default="/tmp/kbload")
    ap.add_argument("--interrupt-after", type=float, default=0.0)
    ap.add_argument("--results", default="", help="directory to write kernelbench_load_cpu.md into")
    args = ap.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    load1 = os.getloadavg()[0]
    lines = [f"# `kernelmill load` of KernelBench (CPU)", "",
             f"`PYTHONPATH=. python3 bench/bench_kernelbench_load.py {args.kbdir} --out {args.out}"
             + (f" --interrupt-after {args.interrupt_after:g}" if args.interrupt_after else "") + "`", "",
             f"{os.cpu_count()} cores, load average at start {load1:.1f}", ""]
    cut = None
    if args.interrupt_after:
        cut = run_load(args.kbdir, args.out, args.interrupt_after)
        cut["rows"] = stored_rows(args.out)
    full = run_load(args.kbdir, args.out)
    a = full["counts"].get("annotate", {})
    lines += ["| run | exit | wall s | max RSS (one process) | peak RSS (process tree) | rows stored after | "
              "annotated in run | already stored | failed |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    if cut:
        ca = cut["counts"].get("annotate", {})
        lines.append(f"| interrupted (timeout {args.interrupt_after:g} s, SIGTERM) | {cut['rc']} | {cut['wall_s']:.1f} | "
                     f"{cut['max_rss_kb'] / 1024:.0f} MiB | {cut['tree_peak_kb'] / 1024:.0f} MiB | {cut['rows']} | "
                     f"{ca.get('annotated', '-')} | {ca.get('already_annotated', '-')} | {ca.get('annotate_failures', '-')} |")
    lines.append(f"| {'rerun (resumes)' if cut else 'full'} | {full['rc']} | {full['wall_s']:.1f} | "
                 f"{full['max_rss_kb'] / 1024:.0f} MiB | {full['tree_peak_kb'] / 1024:.0f} MiB | {stored_rows(args.out)} | "
                 f"{a.get('annotated', '-')} | {a.get('already_annotated', '-')} | {a.get('annotate_failures', '-')} |")
    found = full["counts"].get("load", {}).get("tasks", "-")
    lines += ["", f"programs found: {found}; loaded (rows in {args.out}/tasks): {stored_rows(args.out)}; "
              f"levels annotated in the last run: {a.get('levels', {})}",
              f"failed by category: {a.get('failures_by_category', {})}",
              f"slowest programs (s): {a.get('slowest', [])}", "", "Failures (path [category]: reason):", "```"]
    lines += [f.splitlines()[0][:200] for f in a.get("failures", [])] + ["```"]
    if full["rc"] != 0:
        lines += ["", "stderr tail:", "```", full["stderr_tail"], "```"]
    emit("\n".join(lines) + "\n", args.results, "kernelbench_load_cpu.md")


if __name__ == "__main__":
    main()
