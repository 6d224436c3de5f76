"""Run the jobs on mined code in a sandbox: zygote processes that fork a fresh child per job.

The parent never executes mined code. :class:`SandboxPool` starts one zygote process per worker (``python -I``
importing this module) that imports torch once and then, for every job, forks a fresh child. The child puts itself
in its own process group, works in an empty temporary folder, sends its stdout/stderr to /dev/null, limits its
address space (RLIMIT_AS: the memory the zygote already maps plus ``memory_bytes``) and writes one JSON result file;
the zygote kills the whole group when the job runs past its timeout. Timeouts, and the deduction's own time budget,
are read on synth/mine/own_clock.py's clock (wall time minus the time the child waited for a CPU), so a busy machine
makes mining slower, never different; a child still running after ``WALL_FACTOR`` times its timeout in wall time is
killed anyway (a machine so overloaded is a backstop case, reported as a timeout). A forked child is a fresh
process: the only state it shares with the zygote is the imported torch and kernelmill's own deduction code, never
another job's code.

Jobs (each may name installed packages to ``preload`` in the zygote first: see :func:`preload`):

    deduce    load the program, find constructor arguments (synth/mine/init_args.py), find forward inputs,
              scale free dimensions toward ``target_numel``, then apply the filters in FILTERS order
              (synth/mine/input_synthesis.py, synth/mine/input_filters.py)
    run_file  write the finished KernelBench program to its own file, run it with runpy, return the output
              shapes

Not protected against: code that escapes through already-open file descriptors of the zygote (none are passed but
the pipes), kernel-level resource exhaustion other than memory (threads, disk), or a module that detects it is being
probed.

This file uses only the standard library and kernelmill's deduction modules (themselves standard library only) at
import time; torch is imported inside the sandbox.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import queue
import resource
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from synth.mine.init_args import (MODULE_INSTANCE, NOT_CALLABLE_ERR, PROGRAM_FILE, DeductionFailed, construct,
                             finalize_spec, is_memory_error, params_named_in, render_spec, spec_needs_types)
from synth.mine.input_filters import IOWatch, apply_filters, output_specs
from synth.mine.input_synthesis import deduce_inputs, scale_inputs
from synth.mine.own_clock import own_clock, waited_s

WALL_FACTOR = 10  # a child is killed after this many times its timeout in wall time, whatever its own clock says


# ============================================================================ parent side

# The zygote's interpreter runs isolated (-I: no PYTHONPATH, no user site-packages, neither the current
# nor the script folder on sys.path), so the checkout that holds ``synth`` is on sys.path only while
# this module is imported: mined code then sees the isolated interpreter's own sys.path, nothing more.
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout: synth/mine/ is two below it
_ZYGOTE = ("import sys; sys.path.insert(0, sys.argv[1]); from synth.mine.input_sandbox import zygote_main; "
           "sys.path.remove(sys.argv[1]); zygote_main()")


class SandboxPool:
    """``workers`` zygotes; ``run(job)`` is thread-safe and returns the child's JSON result.

    A zygote that stops answering is killed and replaced; the job then reports reason "sandbox_lost"."""

    def __init__(self, workers: int = 2, memory_bytes: int = 4 << 30):
        self.memory_bytes = int(memory_bytes)
        self._free: queue.Queue = queue.Queue()
        self._all: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        for _ in range(max(1, workers)):
            self._free.put(self._start())  # torch imports in the zygotes while the caller parses files

    def _start(self) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-I", "-u", "-c", _ZYGOTE, _CHECKOUT],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, start_new_session=True)
        with self._lock:
            self._all.append(p)
        return p

    def run(self, job: dict) -> dict:
        job = {**job, "memory_bytes": self.memory_bytes}
        z = self._free.get()
        try:
            if z is None or z.poll() is not None:
                z = self._start()
            result: dict = {}

            def talk() -> None:
                z.stdin.write(json.dumps(job) + "\n")
                z.stdin.flush()
                line = z.stdout.readline()
                if line:
                    result.update(json.loads(line))

            t = threading.Thread(target=talk, daemon=True)
            t.start()
            t.join(WALL_FACTOR * float(job.get("timeout_s", 20)) + 60)  # the zygote enforces the timeout; a backstop
            if not result:
                self._kill(z)
                z = None
                return {"status": "fail", "stage": "sandbox", "reason": "sandbox_lost", "error": "zygote did not answer"}
            return result
        finally:
            self._free.put(z)

    def _kill(self, z: subprocess.Popen) -> None:
        try:
            os.killpg(z.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        z.wait()

    def close(self) -> None:
        with self._lock:
            procs, self._all = self._all, []
        for p in procs:  # zygotes hold no state worth a clean exit; one may still be importing torch
            if p.poll() is None:
                self._kill(p)
            for stream in (p.stdin, p.stdout):
                try:
                    stream.close()
                except OSError:
                    pass

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ============================================================================ jobs (in the child)


def _load_program(code: str, filename: str) -> dict:
    with open(filename, "w") as f:
        f.write(code)
    spec = importlib.util.spec_from_file_location("mined_program", os.path.abspath(filename))
    mod = importlib.util.module_from_spec(spec)
    sys.modules["mined_program"] = mod
    spec.loader.exec_module(mod)
    return vars(mod)


def job_deduce(job: dict) -> dict:
    """The child's work for a ``deduce`` job (see module docstring)."""
    import torch

    t0 = own_clock()  # the budget is read on this clock: a busy machine makes deduction slower, not different
    deadline = t0 + float(job["budget_s"])
    watch = IOWatch()
    try:
        ns = _load_program(job["program"], PROGRAM_FILE)
    except Exception as e:  # noqa: BLE001
        return {"status": "fail", "stage": "load", "reason": "memory" if is_memory_error(e) else "load_failed",
                "error": f"{type(e).__name__}: {str(e)[:300]}"}
    Model = ns["Model"]
    defaults = _defaults(Model)
    phase = {"load": own_clock() - t0}  # seconds per phase, for the benchmark's time budget
    last: DeductionFailed | None = None
    forced: dict[str, int] = {}
    slow: dict | None = None  # the first result that failed only the runtime filter
    try:
        for _ in range(3):  # a forward that calls a constructor argument restarts with it as a module
            retry = False
            for model, args, base in construct(Model, ns, [32, 64, 16, 8], deadline, forced, job.get("init_sites", [])):
                model.eval()
                ints = [a.value for a in args if isinstance(a.value, int) and not isinstance(a.value, bool) and a.value > 1]
                try:
                    names, guesses, out = deduce_inputs(model, base, ints, deadline,
                                                        init_values={**defaults, **{a.name: a.value for a in args}})
                except DeductionFailed as e:
                    if e.reason == "memory":
                        raise
                    last = e
                    called = module_args_called(e, args, forced)
                    if called:
                        forced.update(called)
                        retry = True
                        break
                    continue
                phase["deduce"] = own_clock() - t0
                guesses, out = scale_inputs(model, guesses, out, int(job["target_numel"]), deadline,
                                            float(job["max_forward_s"]), job.get("scale_work"))
                phase["scale"] = own_clock() - t0 - phase["deduce"]
                failed, detail, seconds = apply_filters(model, guesses, out, watch, float(job["max_forward_s"]),
                                                        float(job.get("min_forward_s", 0.0)))
                phase["filters"] = own_clock() - t0 - phase["deduce"] - phase["scale"]
                specs = [finalize_spec(a.spec) for a in args]
                result = {"init_args": [render_spec(s) for s in specs],
                          "init_params": [{"name": a.name, "keyword": a.keyword} for a in args],
                          "needs_types": any(spec_needs_types(s) for s in specs),
                          "inputs": [g.as_dict(n) for n, g in zip(names, guesses)], "outputs": output_specs(out),
                          "forward_s": seconds, "torch_threads": torch.get_num_threads(),
                          "phase_s": {k: round(v, 3) for k, v in phase.items()}}
                if failed == "runtime" and slow is None:
                    # a call site of the repository can build a model too big for the runtime limit:
                    # the guessed (small) arguments come next
                    slow = {"status": "fail", "stage": "filter", "reason": failed, "error": detail, **result}
                    continue
                if failed:
                    return {"status": "fail", "stage": "filter", "reason": failed, "error": detail, **result}
                return {"status": "ok", **result}
            if not retry:
                break
    except DeductionFailed as e:
        last = e
    except Exception as e:  # noqa: BLE001
        last = DeductionFailed("forward", "memory" if is_memory_error(e) else "crash", f"{type(e).__name__}: {str(e)[:300]}")
    if slow is not None:
        return slow
    last = last or DeductionFailed("init", "init_failed", "")
    return {"status": "fail", "stage": last.stage, "reason": last.reason, "error": last.error}


def _defaults(Model) -> dict:
    """The constructor's plain default values (``channels=3``), which also say what the input is."""
    try:
        params = inspect.signature(Model).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in params if isinstance(p.default, (int, float, tuple, list))}


def module_args_called(e: DeductionFailed, args: list, forced: dict[str, int]) -> dict[str, int]:
    """Constructor arguments the failed forward called as modules (``self.fn(x)`` on an int): they are
    guessed as module instances on the next attempt. Empty when the error is something else."""
    if not NOT_CALLABLE_ERR.search(e.error):
        return {}
    names = [a.name for a in args if a.name not in forced and not isinstance(a.value, nn_module_type())]
    return {n: MODULE_INSTANCE for n in params_named_in(e.line, names)[:1]}


def nn_module_type():
    import torch.nn as nn

    return nn.Module


def job_run_file(job: dict) -> dict:
    """Run a finished KernelBench program from its own file; report the output specs."""
    import torch

    with open("task.py", "w") as f:
        f.write(job["program"])
    try:
        g = runpy.run_path(os.path.abspath("task.py"), run_name="kernelbench_task")
        torch.manual_seed(0)
        model = g["Model"](*g["get_init_inputs"]()).eval()
        with torch.no_grad():
            out = model(*g["get_inputs"]())
    except Exception as e:  # noqa: BLE001
        return {"status": "fail", "stage": "run_file", "reason": "run_file_failed", "error": f"{type(e).__name__}: {str(e)[:300]}"}
    return {"status": "ok", "outputs": output_specs(out)}


# ============================================================================ zygote


def _vm_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _child(job: dict, result_path: str) -> None:
    res: dict
    try:
        os.setpgid(0, 0)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        limit = _vm_bytes() + int(job["memory_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        import torch

        torch.set_num_threads(int(job.get("threads", 1)))
        res = job_deduce(job) if job["mode"] == "deduce" else job_run_file(job)
    except BaseException as e:  # noqa: BLE001 - everything must end in a result
        res = {"status": "fail", "stage": job.get("mode", "?"), "reason": "memory" if is_memory_error(e) else "crash",
               "error": f"{type(e).__name__}: {str(e)[:300]}"}
    try:
        with open(result_path + ".tmp", "w") as f:
            json.dump(res, f, default=str)
        os.rename(result_path + ".tmp", result_path)
    finally:
        os._exit(0)


def fork_and_run(job: dict) -> dict:
    """Fork a child for one job, enforce the timeout on its whole process group, return its result."""
    workdir = tempfile.mkdtemp(prefix="kernelmill-sbx-")
    result_path = os.path.join(workdir, "result.json")
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.chdir(workdir)
        _child(job, result_path)
    limit = float(job.get("timeout_s", 20))
    status = None
    try:
        while True:
            wpid, status = os.waitpid(pid, os.WNOHANG)
            if wpid:
                break
            wall = time.monotonic() - t0
            if wall > limit and (wall - waited_s(pid) > limit or wall > WALL_FACTOR * limit):
                for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                    try:
                        target()
                    except (ProcessLookupError, PermissionError):
                        pass
                os.waitpid(pid, 0)
                return {"status": "fail", "stage": job["mode"], "reason": "timeout",
                        "error": f"no result within {job.get('timeout_s')} s", "seconds": time.monotonic() - t0}
            time.sleep(0.005)
        try:
            os.killpg(pid, signal.SIGKILL)  # stray grandchildren
        except (ProcessLookupError, PermissionError):
            pass
        if os.path.exists(result_path):
            with open(result_path) as f:
                res = json.load(f)
        else:
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
            res = {"status": "fail", "stage": job["mode"], "reason": "crash", "error": f"child died (signal {sig})"}
        res["seconds"] = time.monotonic() - t0
        return res
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def preload(names: list[str], done: set[str]) -> None:
    """Import installed packages (never mined code) in the zygote, so that children forked later start
    with them: einx costs 2.5 s to import, paid once per zygote instead of twice per module. Output of
    an import goes to /dev/null (stdout is the result pipe); a package that fails to import is left to
    the child, which reports it."""
    for name in names:
        if name in done:
            continue
        done.add(name)
        sys.stdout.flush()
        saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - SystemExit too: the zygote must keep serving
            pass
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)


def zygote_main() -> None:
    import torch  # noqa: F401 - imported once here so that every forked child starts with it
    # The first forward under a dispatch mode (input scaling's work count, synth/mine/input_synthesis.py)
    # imports torch._dynamo: 1-2 s of every child's budget, and file reads a busy disk stretches, when it is
    # not imported here once. It starts no thread.
    import torch._dynamo  # noqa: F401

    preloaded: set[str] = set()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            job = json.loads(line)
            preload(job.get("preload", []), preloaded)
            res = fork_and_run(job)
        except Exception as e:  # noqa: BLE001
            res = {"status": "fail", "stage": "sandbox", "reason": "crash", "error": repr(e)[:300]}
        sys.stdout.write(json.dumps(res, default=str) + "\n")
        sys.stdout.flush()

