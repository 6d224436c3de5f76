"""Where the test suite's time goes: the README's test command (``pytest -m "not gpu" -n 2 --dist loadfile``) run
once while bench/lib/proc_cpu.py samples every process of the host, then a table of the CPU-seconds by kind of
process (compilers, execution processes, pytest workers, Prefect, Ray, ...) beside the wall and the host's busy
share. On the 2-core machine the suite is bound by its cores (host busy 0.94 at fb430c7), so its wall follows its
CPU: this says which work to cut.

    PYTHONPATH=. python3 bench/bench_suite_cpu.py [--workers 2] [--out bench/results] [pytest args ...]

Prints a markdown table (and writes suite_cpu_<commit>.md under ``--out`` when given)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import emit  # noqa: E402
from bench.lib import proc_cpu  # noqa: E402

# what the suite's Python processes are, by a piece of their command line (the first that matches)
PYTHON_KINDS = (("exec(eval(sys.stdin", "pytest-xdist workers (the tests' own Python, fixtures, in-process "
                                         "verification: the judge, plans)"),
                ("pytest", "nested pytest runs and the controller"), ("prefect", "Prefect servers and workers"),
                ("ray", "Ray processes"), ("flows.cli", "kernelmill CLI processes"),
                ("kernelmill", "kernelmill CLI processes"), ("synth.", "synthesis helpers (annotation, mining)"))


_BASE_KIND = proc_cpu.kind


def kind(pid: int, comm: str, cmd: str, me: int) -> str:
    k = _BASE_KIND(pid, comm, cmd, me)
    if k != "other python":
        return k
    return next((name for key, name in PYTHON_KINDS if key in cmd), "other python")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (the README's command: 2)")
    ap.add_argument("--out", default="", help="a directory to write suite_cpu_<commit>.md into")
    args, rest = ap.parse_known_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    proc_cpu.kind = kind  # the sampler classifies each process once, when it first sees it
    sampler = proc_cpu.ProcCpu(interval=0.2)
    sampler.start()
    t0 = time.monotonic()
    rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "-m", "not gpu", "-n", str(args.workers),
                          "--dist", "loadfile", *rest], cwd=ROOT)
    wall = time.monotonic() - t0
    by_kind = sampler.finish()
    total = sum(s for s, _ in by_kind.values())
    lines = [f"# The test suite's CPU by kind of process ({commit})", "",
             f"`python3 bench/bench_suite_cpu.py --workers {args.workers}`: pytest exit {rc}, wall {wall:.0f} s, "
             f"host busy {sampler.host_busy:.2f}, {total:.0f} CPU-s sampled.", "",
             "| CPU-s | share | processes | kind |", "| ---: | ---: | ---: | --- |"]
    for k, (sec, n) in by_kind.items():
        if sec >= 1.0:
            lines.append(f"| {sec:.1f} | {sec / total:.0%} | {n} | {k} |")
    emit("\n".join(lines) + "\n", args.out, f"suite_cpu_{commit}.md")
    sys.exit(rc)


if __name__ == "__main__":
    main()
