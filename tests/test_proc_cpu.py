"""bench/lib/proc_cpu.py: the host CPU seconds by kind of process that bench_verifier.py reports."""

import resource
import subprocess
import sys

from bench.lib.proc_cpu import ProcCpu, kind


def test_processes_are_classified_by_what_they_run():
    me = 1
    sup = "python3 -m verifier.common.sandbox --supervise 7 -- python3 -m verifier.build.proc compile /b/k/light"
    assert kind(5, "python3", sup, me).startswith("sandbox supervisors")
    assert kind(5, "python3", "python3 -m verifier.child.worker --serve", me).startswith("execution processes")
    assert kind(5, "python3", "python3 -m verifier.child.worker /jobs/km-candidate-1", me).startswith("execution processes")
    assert kind(5, "python3", "python3 -m verifier.build.proc check /b/k/light/km_ext.so km_k /t/c.json", me).startswith(
        "build steps")
    assert kind(5, "cicc", "cicc ...", me).startswith("compilers")
    assert kind(me, "python3", "python3 bench/bench_verifier.py", me).startswith("benchmark process")


def test_a_childs_cpu_is_counted_under_its_kind():
    p = ProcCpu(interval=0.05)
    p.start()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # a build-process look-alike that burns CPU for about a second, then sleeps past a sample before exiting
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 1.0: pass\ntime.sleep(0.3)", "verifier.build.proc"])
    assert child.wait() == 0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    by_kind = p.finish()
    build = "build steps (python: ninja driver, import check of the built module)"
    sec, n = by_kind[build]
    # the host's processes are all sampled: under pytest-xdist another worker's real build steps add to the kind,
    # new ones to its count and ones older than the sampler to its seconds only (CI: 2.0 s from one new process),
    # so the child itself is read by its pid
    assert n >= 1 and sec >= 0.8, by_kind
    kind_seen, cpu = p.last[child.pid]
    # what the child used by the kernel's own count: its second and its interpreter's start, which on a loaded machine
    # took 0.7 CPU-s more (CI: 1.7 in all), so the sampler is held to that, not to a fixed bound; never more than it
    # (clock ticks: 0.01 s), less only by what the child spent after the last sample (its exit)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert kind_seen == build and child.pid not in p.base and used - 0.5 <= cpu <= used + 0.05, (cpu, used, by_kind)


def test_compilers_under_the_references_torch_compile_are_counted_apart_from_builds(tmp_path):
    """A compiler whose parent is an execution process or inductor's compile worker (triton's ptxas, inductor's C++)
    is the reference's torch.compile at work, not a candidate's build: the report keeps the two apart."""
    from bench.lib.proc_cpu import INDUCTOR, UNDER_COMPILE

    assert kind(5, "python3", "python3 -m torch._inductor.compile_worker --workers=16", 1) == INDUCTOR
    # an inductor-worker look-alike that starts the compiler
    by_kind = _sampled_compiler(tmp_path, "import subprocess, sys, time\ntime.sleep(0.3)\n"
                                          "subprocess.run([sys.argv[1], '-c', sys.argv[2]], check=True)")
    assert by_kind[UNDER_COMPILE][0] >= 0.8, by_kind


def _sampled_compiler(tmp_path, launcher: str) -> dict:
    """The sampler's table over ``launcher`` (python code, with the compiler's path and program as its arguments,
    and an inductor worker's module name on its command line) starting a "compiler": the interpreter under a
    compiler's name (a process's name is its executable's, a link's name included), so that it burns one CPU-second
    by its own clock whatever the machine's speed and load (a shell loop of a fixed count took 0.4 CPU-s on a fast
    machine)."""
    cc = tmp_path / "cc1plus"
    cc.symlink_to(sys.executable)
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass\ntime.sleep(0.3)"
    p = ProcCpu(interval=0.05)
    p.start()
    subprocess.run([sys.executable, "-c", launcher, str(cc), burn, "torch._inductor.compile_worker"], check=True)
    return p.finish()


def test_a_process_is_counted_as_the_program_it_execs_into(tmp_path):
    """A process seen before its exec (a fork still showing its parent's name and command line, here a python that
    waits, then execs a compiler) is counted from then on as the program it became."""
    from bench.lib.proc_cpu import INDUCTOR

    by_kind = _sampled_compiler(tmp_path, "import os, sys, time\ntime.sleep(0.5)\n"
                                          "os.execv(sys.argv[1], [sys.argv[1], '-c', sys.argv[2]])")
    assert by_kind["compilers (nvcc phases, gcc, ninja, ld)"][0] >= 0.8, by_kind
    assert by_kind.get(INDUCTOR, (0.0, 0))[0] < 0.5, by_kind


def test_an_execution_child_that_names_itself_after_its_job_is_counted_under_that_job():
    """A fork server's child is seen first as ``python`` (it makes its CUDA context while it waits for a job), then
    names itself after the job (verifier/child/worker.py ``name_process``): its whole CPU goes to the job's kind."""
    from bench.lib.proc_cpu import JOB_KINDS

    p = ProcCpu(interval=0.05)
    p.start()
    code = ("import time, ctypes\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n"
            "time.sleep(0.2)\n"  # seen under the server's kind first
            "from verifier.child.worker import name_process\nfrom verifier.common.contract import Job\n"
            "name_process(Job(kind='reference', backend='cpu', build_root='', reference_code='', init_seed=0))\n"
            "t = time.process_time()\nwhile time.process_time() - t < 0.4: pass\ntime.sleep(0.3)")
    subprocess.run([sys.executable, "-c", code, "verifier.child.worker"], check=True)
    by_kind = p.finish()
    sec, n = by_kind[JOB_KINDS["km-reference"]]
    assert n >= 1 and sec >= 0.7, by_kind


def test_any_command_is_sampled_and_its_exit_status_kept(tmp_path):
    """``python3 -m bench.lib.proc_cpu -- CMD``: the command runs, its CPU lands in the table by kind (a compiler's
    name here), and its exit status is the sampler's (a failing suite stays failing)."""
    from bench.lib.proc_cpu import main

    cc = tmp_path / "cc1plus"
    cc.symlink_to(sys.executable)
    out = tmp_path / "table.md"
    burn = ("import time\nt = time.process_time()\nwhile time.process_time() - t < 1.2: pass\ntime.sleep(0.3)\n"
            "raise SystemExit(3)")
    assert main(["--out", str(out), "--", str(cc), "-c", burn]) == 3
    text = out.read_text()
    assert "exit 3" in text and "| compilers (nvcc phases, gcc, ninja, ld) |" in text, text
    row = next(line for line in text.splitlines() if "| compilers (nvcc" in line)
    assert float(row.split("|")[1]) >= 1.0, text


def test_the_suites_python_processes_are_named_by_the_program_not_by_a_path():
    """A process whose arguments merely pass through the suite's temporary paths (/tmp/pytest-of-root/...,
    /tmp/kernelmill-tests-run-...) is named by the program it runs."""
    me = 1
    worker = "python3 -c import sys;exec(eval(sys.stdin.readline()))"
    assert kind(5, "python3", worker, me).startswith("pytest-xdist workers")
    assert kind(5, "python3", "python3 -m pytest -q -n 2 tests", me).startswith("pytest runs")
    assert kind(5, "python3", "python3 -m flows.cli run --out /tmp/pytest-of-root/pytest-3/x", me).startswith(
        "kernelmill CLI")
    assert kind(5, "python3", "python3 -m prefect server start --host /tmp/pytest-of-root/p", me).startswith("Prefect")
    assert kind(5, "python3", "python3 /usr/lib/python3/site-packages/ray/_private/workers/default_worker.py",
                me).startswith("Ray")
    assert kind(5, "python3", "python3 -c print(1) /tmp/kernelmill-tests-run-x/array", me) == "other python"


def test_a_childs_cpu_lands_in_the_windows_it_was_spent_in(tmp_path):
    """The timeline bench_verifier.py reports (where a batch's cores went, window by window): a child that burns a
    second of CPU in the first window and sleeps through the next ones has its second there, under its kind, and the
    windows add up to the run's total for that kind. The child runs under a name of its own (the interpreter linked
    as ``kmwindowprobe``: its kind is "other: kmwindowprobe"), since every process of the host is sampled and the
    other pytest-xdist worker's builds would add to any kind the verifier's processes have."""
    from bench.lib.real_report import timeline_lines

    probe = tmp_path / "kmwindowprobe"
    probe.symlink_to(sys.executable)
    p = ProcCpu(interval=0.05, window_s=1.5)
    p.start()
    child = subprocess.Popen([str(probe), "-c", "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 1.0: pass\ntime.sleep(2.5)"])
    assert child.wait() == 0
    by_kind = p.finish()
    wins = p.windows()
    mine = "other: kmwindowprobe"
    assert len(wins) >= 3 and [w["t"] for w in wins[:3]] == [0.0, 1.5, 3.0], wins
    assert wins[0]["kinds"].get(mine, 0.0) + wins[1]["kinds"].get(mine, 0.0) >= 0.8, wins  # its busy second
    assert all(w["kinds"].get(mine, 0.0) < 0.2 for w in wins[2:]), wins  # asleep
    # each window's figure is rounded to 0.1 s and the total to 0.1 s
    assert abs(sum(w["kinds"].get(mine, 0.0) for w in wins) - by_kind[mine][0]) <= 0.05 * (len(wins) + 1) + 1e-9, \
        (wins, by_kind)
    assert all(w["busy"] is None or 0.0 <= w["busy"] <= 1.0 for w in wins), wins
    lines = timeline_lines({"cpu_windows": [dict(w, kinds={"build steps (python: ninja driver)": 1.2})
                                            for w in wins]})
    assert lines[2].startswith("| from s | host busy | torch.compile | compilers | build steps")
    first = lines[4].split(" | ")
    assert first[0] == "| 0" and first[4] == "0.8", lines  # build steps: 1.2 CPU-s over a 1.5 s window
