"""Host CPU seconds by kind of process (and GPU utilisation samples, ``GpuSampler``) while the verifier runs (used by bench/bench_verifier.py): a thread reads ``/proc/<pid>/stat`` (user +
system ticks) of every process on the box every ``interval`` seconds and keeps each pid's last reading, so a
process's CPU is counted up to its last sample before it exited (compilers live for seconds: the part lost
is under ``interval`` per process). Kinds come from the process name and, for Python, its command line:
what the verifier's build processes and compilers cost against its execution processes, its sandbox
wrappers and the parent. ``host_busy``: the share of all cores' time the host was busy over the run (/proc/stat).

Linux only; elsewhere :meth:`ProcCpu.finish` returns nothing and ``host_busy`` is nan.

Any command, sampled so (the test suite: where its time goes on the 2-core machine, bench/results/suite_cpu_*.md):

    PYTHONPATH=. python3 -m bench.lib.proc_cpu [--out FILE.md] -- python3 -m pytest -q -m "not gpu" -n 2 --dist loadfile
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections import defaultdict

COMPILERS = {"nvcc", "cicc", "cudafe++", "ptxas", "fatbinary", "nvlink", "cc1plus", "cc1", "c++", "g++", "gcc",
             "as", "ld", "collect2", "ninja", "x86_64-linux-gn", "sh"}


INDUCTOR = "torch.compile's compile workers (inductor; the reference's timing)"
UNDER_COMPILE = "compilers under torch.compile (triton, inductor's C++: the reference's timing)"
# how long (s) after it is first seen a process's command line is re-read: one seen between its fork and its exec
# still shows its parent's, and a python that execs a python keeps its name
YOUNG_S = 2.0
EXECUTION = "execution processes (python: torch, CUDA context, profiler, the job)"
# an execution child names itself after its job once it has one (verifier/child/worker.py ``name_process``): all
# its CPU, the CUDA context it made while it waited for the job included, is that kind's
JOB_KINDS = {"km-candidate": "candidate execution children (CUDA context, profiler, trials, timing; knockouts too)",
             "km-reference": "reference children (the task's plan, eager and torch.compile timing)"}


# the other Python processes (a test suite's), by a piece of their command line: the first that matches. Pieces of a
# program's name, not bare words: the suite's paths hold "pytest" and "kernelmill" (/tmp/pytest-of-root/...)
PYTHON_KINDS = (("exec(eval(sys.stdin", "pytest-xdist workers (tests, fixtures, in-process verification)"),
                ("-m prefect", "Prefect servers and workers"), ("/prefect ", "Prefect servers and workers"),
                ("/ray/", "Ray processes"), ("flows.cli", "kernelmill CLI processes"),
                ("bin/kernelmill", "kernelmill CLI processes"), ("synth.", "synthesis helpers (annotation, mining)"),
                ("-m pytest", "pytest runs (a controller, nested runs)"),
                ("bin/pytest", "pytest runs (a controller, nested runs)"))


def kind(pid: int, comm: str, cmdline: str, me: int) -> str:
    if comm in JOB_KINDS:
        return JOB_KINDS[comm]
    if pid == me:
        return "benchmark process (parent: scheduling, task plans; judging where slots are threads)"
    if comm in COMPILERS:
        return "compilers (nvcc phases, gcc, ninja, ld)"
    if comm.startswith("python") or "python" in cmdline.split(" ", 1)[0]:
        if "verifier.common.sandbox" in cmdline:  # first: a supervisor's command line ends with the one it supervises
            return "sandbox supervisors (python)"
        if "verifier.build.proc" in cmdline:  # torch-free: the compile step's ninja driver, the import check
            return "build steps (python: ninja driver, import check of the built module)"
        if "verifier.child.worker" in cmdline:  # fork servers (torch), their forked children (CUDA, profiler, the job)
            return "execution processes (python: torch, CUDA context, profiler, the job)"
        if "serve_slot" in cmdline:  # verifier/workers.py: an execution slot's trusted process
            return "slot processes (the harness and judge of an execution slot)"
        if "torch._inductor" in cmdline or "compile_worker" in cmdline:  # inductor's pool of compile workers
            return INDUCTOR
        return next((name for key, name in PYTHON_KINDS if key in cmdline), "other python")
    if comm == "bwrap":
        return "bubblewrap"
    if comm == "nvidia-smi":
        return "nvidia-smi (the GPU sampler)"
    return "other: " + comm


def proc_stat(pid: int) -> tuple[str, list[str]]:
    """A process's name and the fields of ``/proc/<pid>/stat`` after it (state, ppid, ...: ``fields[0]`` is field 3 of
    proc(5)); the name may hold spaces and parentheses, so it is cut at the last ")". OSError where it is gone."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()


def host_cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all the host's cores from /proc/stat (busy: all but idle and iowait)."""
    try:
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    total = sum(vals[:8])  # guest time is already inside user
    return total - idle, total


class ProcCpu(threading.Thread):
    def __init__(self, interval: float = 0.25, window_s: float = 15.0):
        super().__init__(daemon=True)
        self.interval, self.stop = interval, threading.Event()
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.last: dict[int, tuple[str, float]] = {}  # pid -> (kind, cpu s at the last sample)
        self.base: dict[int, float] = {}  # pid -> cpu s already spent when first seen (processes older than us)
        self.seen: dict[int, tuple[str, float]] = {}  # pid -> (its name at the last sample, when first seen)
        self.me = os.getpid()
        self.window_s = window_s
        # {window index: {kind: CPU s}} (what each kind spent in each window of window_s since the start), and the
        # host's (busy, total) jiffies at each window's first sample: where in a batch the cores went
        self.timeline: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.window_ticks: dict[int, tuple[int, int]] = {}
        self.t0 = time.monotonic()
        self._sample(first=True)  # processes alive before the run: only what they spend from now on counts
        self.ticks0 = host_cpu_ticks()
        self.host_busy = float("nan")  # the host's busy fraction over the run, set by finish()

    def _sample(self, first: bool = False) -> None:
        try:
            pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
        except OSError:
            return
        w = int((time.monotonic() - self.t0) // self.window_s)
        if w not in self.window_ticks:
            self.window_ticks[w] = host_cpu_ticks()
        for pid in pids:
            try:
                comm, fields = proc_stat(pid)
                cpu = (int(fields[11]) + int(fields[12])) / self.tick
                if pid not in self.last:
                    k = self._classify(pid, comm, fields)
                    self.last[pid] = (k, cpu)
                    self.seen[pid] = (comm, time.monotonic())
                    if first:
                        self.base[pid] = cpu
                    else:  # a process born since the last sample: all it spent is this window's
                        self.timeline[w][k] += cpu
                    continue
                k = self.last[pid][0]
                was, born = self.seen[pid]
                if comm in JOB_KINDS:  # a fork server's child that took its job since the last sample
                    k = JOB_KINDS[comm]
                elif comm != was or time.monotonic() - born < YOUNG_S:
                    # a process seen between its fork and its exec carries its parent's name and command line: the
                    # program it becomes decides its kind (in the timeline, what it spent before stays where it was)
                    k = self._classify(pid, comm, fields, k)
                self.timeline[w][k] += cpu - self.last[pid][1]
                self.last[pid] = (k, cpu)
                self.seen[pid] = (comm, born)
            except (OSError, ValueError, IndexError):
                continue

    def _classify(self, pid: int, comm: str, fields: list[str], was: str = "") -> str:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        if was and not cmd:  # a zombie (or a kernel thread) shows no command line: it stays what it was
            return was
        k = kind(pid, comm, cmd, self.me)
        parent = self.last.get(int(fields[1]), ("",))[0]
        if k.startswith("compilers") and parent in (EXECUTION, INDUCTOR, UNDER_COMPILE):
            k = UNDER_COMPILE  # a compiler the reference's torch.compile started, not a candidate's build
        return k

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            self._sample()
        self._sample()

    def finish(self) -> dict[str, tuple[float, int]]:
        """Stop; {kind: (CPU seconds during the run, processes seen)}, and ``host_busy`` set."""
        busy1, total1 = host_cpu_ticks()
        busy0, total0 = self.ticks0
        self.host_busy = (busy1 - busy0) / (total1 - total0) if total1 > total0 else float("nan")
        self.stop.set()
        self.join()
        out: dict[str, list] = defaultdict(lambda: [0.0, 0])
        for pid, (k, cpu) in self.last.items():
            spent = cpu - self.base.get(pid, 0.0)
            if spent > 0 or pid not in self.base:
                out[k][0] += max(0.0, spent)
                out[k][1] += pid not in self.base
        return {k: (round(v[0], 1), v[1]) for k, v in sorted(out.items(), key=lambda kv: -kv[1][0])}

    def windows(self) -> list[dict]:
        """After ``finish``: per window of ``window_s`` since the start, {"t": its start s, "busy": the host's busy
        share in it, "kinds": {kind: CPU s}} (a process's CPU goes to the window of the sample that saw it spent)."""
        keys = sorted(self.window_ticks)
        out = []
        for j, w in enumerate(keys):
            b0, t0 = self.window_ticks[w]
            b1, t1 = self.window_ticks[keys[j + 1]] if j + 1 < len(keys) else host_cpu_ticks()
            out.append({"t": round(w * self.window_s, 1), "busy": round((b1 - b0) / (t1 - t0), 3) if t1 > t0 else None,
                        "kinds": {k: round(v, 1) for k, v in self.timeline.get(w, {}).items() if v >= 0.05}})
        return out


class GpuSampler(threading.Thread):
    """nvidia-smi utilization samples every 0.5 s while running."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples, self.stop = [], threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=5).stdout.split()
                self.samples.append(float(out[0]))
            except Exception:  # noqa: BLE001
                pass
            self.stop.wait(0.5)


def main(argv: list[str] | None = None) -> int:
    """Run the command after ``--`` while every process of the host is sampled; print (and with ``--out`` write) a
    markdown table of its CPU-seconds by kind, with the wall and the host's busy share. Returns the command's exit."""
    import argparse
    import shlex
    import sys
    import time

    ap = argparse.ArgumentParser(prog="python3 -m bench.lib.proc_cpu", description=main.__doc__)
    ap.add_argument("--out", default="", help="a markdown file to write the table into")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no command given (put it after --)")
    sampler = ProcCpu(interval=0.2)
    sampler.start()
    t0 = time.monotonic()
    rc = subprocess.call(cmd)
    wall = time.monotonic() - t0
    by_kind = sampler.finish()
    total = sum(s for s, _ in by_kind.values()) or 1.0
    lines = [f"`{shlex.join(cmd)}`: exit {rc}, wall {wall:.0f} s, host busy {sampler.host_busy:.2f}, "
             f"{total:.0f} CPU-s sampled.", "", "| CPU-s | share | processes | kind |", "| ---: | ---: | ---: | --- |"]
    lines += [f"| {sec:.1f} | {sec / total:.0%} | {n} | {k} |" for k, (sec, n) in by_kind.items() if sec >= 1.0]
    text = "\n".join(lines) + "\n"
    print(text, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return rc


def cpu_model() -> str:
    """The host CPU's model name (/proc/cpuinfo), so that two runs' compile figures can be read against their hosts:
    the device tool does not always lend the same machine (one H200 host built the same sources with 40% more
    CPU-seconds than another)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    raise SystemExit(main())
