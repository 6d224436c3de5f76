"""One build of an extension spec, in the calling thread: its variants written and run as steps.

How a build runs. The thread that calls ``build_blocking`` writes each variant's sources and build.ninja into
``<key>/<label>`` (``load_inline`` stopped before ninja, in this process, which has torch), then runs two
torch-free processes (``python -m verifier.build.proc``), niced below execution and timing (``COMPILE_NICE``),
each in its own process group:
- the compile step (compilers only; the object cache, verifier/build/objcache.py, for a spec
  ``objcache.cacheable`` accepts);
- the import check: the module imported under the spec's own name, as the execution process loads it (its static
  initialisers and pybind11 init are the candidate's code). It needs torch's shared libraries on the library path
  (``library_dirs``), not torch's import; a module that fails to import so is tried again with torch imported
  first (load_inline's own conditions) before it fails the variant, and the log says so.

Sandboxes: each step has its own (read-only view, no network, no host environment, its processes ended with it).
The compile step may write its variant's directory, and the object cache only for a cacheable spec; the
precompiled header is bound read-only. The import check may write nothing of the build root, the object cache or
the precompiled headers (only a private report directory): if it shared the compile's sandbox, a candidate's
static initialiser could replace a cached object or the PCH that later candidates' builds use. An escape attempt
fails the build with ``[verifier sandbox]`` in its log and ``sandbox.json`` in the key directory. Compiler
messages located in files outside the candidate's sources and the installed headers keep their location but not
their text (``redact_compiler_log``), so a build log quotes no other file.

The variants tried in order, and when a failed one is final: verifier/build/variants.py. The pool that runs builds
and the guarantees around them: verifier/build/pool.py.
"""

from __future__ import annotations

import functools
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from verifier.build import objcache, proc
from verifier.build.pch import boxed_module_made, make_in_background, pch_ready, write_build_files
from verifier.build.slim import SLIM_HEAD, SLIM_HEADERS
from verifier.build.split import HOST_FILE, HOST_OBJECT
from verifier.build.variants import (
    FALLBACK_OFF,
    bare_supported,
    variants_and_rewrites,
    variant_failure_is_final,
)
from verifier.common import childenv, priority, sandbox
from verifier.common.config import HostSettings
from verifier.common.devlock import device_lock
from verifier.common.spec import extension_name

COMPILE_NICE = priority.BUILD  # scheduling priority of build processes, below execution and timing
# the import check: torch's import (~5 CPU-s with one thread) and the module's static initialisers; past it the step
# is stopped by SIGXCPU (its exit status as the process, a shell or the sandbox's supervisor reports it)
CHECK_CPU_S = 60
_CPU_LIMIT_RC = (-signal.SIGXCPU, 128 + signal.SIGXCPU, 256 - signal.SIGXCPU)
# the import check waits for the host's device locks until the build's deadline less this (the check's own run):
# it never goes on without them. It used to go on after 30 s, and a timing window open that long (a batch's first
# tasks' reference timings one after another; waits of 26.7 s on one H200 at 4e97331) let a candidate's static
# initialiser put work on the device while a reference was timed, inflating its own speedup. A check that cannot
# have the locks by then is the verifier's error (``CodeLocksBusy``), never the candidate's build failure
CHECK_RESERVE_S = 60.0
# ... but at least this long: the wait is the verifier's, not the candidate's. At fc7cebe six pytest workers' builds
# shared one H100 box's 16 cores, compiles took 246 s of a 300 s deadline, and the checks of four honest candidates
# waited 1 s for a timing window and were the verifier's error; a check that got its locks late gets its reserve
# past the deadline (``_gate``), so the candidate is never charged for the wait
CHECK_LOCK_MIN_S = 120.0


class CodeLocksBusy(RuntimeError):
    """The import check could not have the host's device locks before its build's deadline: the verifier's
    failure (the build's ``verifier_error``), never the candidate's."""


# OMP_NUM_THREADS=1: nothing in a build computes (torch's import, where the import check still does it, with a thread
# per core cost 6.5-7.5 CPU-s against 4.9 s with one on the 16-core H100 box); MAX_JOBS=1: one compiler per build
STEP_ENV = {"MAX_JOBS": "1", "OMP_NUM_THREADS": "1"}
TORCH_FIRST = "the built module imported only with torch imported first"


def slim_heads(variants: list[tuple[str, dict]]) -> dict:
    """The slim heads (verifier/build/slim.py) a build's variants start a host unit with: head -> its header."""
    return {head: header for head, header in SLIM_HEADERS.items()
            if any(str(kw.get("host_source", "")).startswith(head) for _, kw in variants)}


class Build:
    """One build's variants, tried in order by the calling thread until one compiles and imports (module
    docstring) with the host settings ``host``; ``cpu`` sums the CPU seconds of its steps and of this thread's own
    work for it."""

    def __init__(self, key: str, key_dir: Path, objects: Path, log, host: HostSettings):
        self.key, self.key_dir, self.objects, self.log, self.host = key, key_dir, objects, log, host
        self.cpu, self.timed_out, self.findings, self.pch = 0.0, False, [], None
        self.lock_wait = 0.0  # the import checks' waits for the device locks (BuildResult.lock_wait_s)

    def say(self, text: str) -> None:
        self.log.write(text if text.endswith("\n") else text + "\n")
        self.log.flush()

    def run(self, spec: dict, timeout_s: float, full_fallback: bool) -> dict:
        """The variants in order; returns the result's fields ({} when the build failed)."""
        c0 = time.thread_time()
        variants, rewritten = variants_and_rewrites(spec, bare_supported(), self.host.split_build)
        if rewritten:
            self.say(f"[verifier] torch API compatibility: {rewritten} AT_DISPATCH argument(s) `x.type()` read as "
                     f"`x.scalar_type()` (today's torch no longer converts one to the other)")
        cacheable = objcache.cacheable(spec)
        host = self.host  # [verify] pch_dir ("" when pch is off), canonical_binding
        # whitelisted flags; the headers and the boxed module object where made, else made in the background (at
        # the lowest priority: pch.make_in_background) while this build goes on without them
        heads = slim_heads(variants)
        root = Path(host.pch_dir) if cacheable and host.pch_dir else None
        self.pch = pch_ready(spec, root) if root is not None else None
        self.slim_pch = {head: pch_ready(spec, root, header) for head, header in heads.items()} \
            if self.pch is not None else {}
        if root is not None and (self.pch is None or None in self.slim_pch.values() or (
                host.canonical_binding and not boxed_module_made(self.pch))):
            make_in_background(spec, root, boxed=host.canonical_binding, headers=tuple(heads.values()))
        self.cpu += time.thread_time() - c0
        env = dict(os.environ, **STEP_ENV, PYTHONPATH=os.pathsep.join(
            [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]))
        self.compile_args = (["--objects", str(self.objects)] if cacheable else []) + \
            ([] if host.canonical_binding else ["--as-written"])
        self.compile_env = env
        self.compile_rw = [self.objects] if cacheable else []
        self.check_env = dict(env, LD_LIBRARY_PATH=os.pathsep.join(library_dirs()))
        self.deadline = time.monotonic() + timeout_s
        for n, (label, kwargs) in enumerate(variants):
            last = n == len(variants) - 1
            log_file = self.key_dir / ("build.log" if last else f"{label}.log")
            out = self.log if last else open(log_file, "w")
            try:
                failed, so, reused = self.variant(label, kwargs, out)
            finally:
                if not last:
                    out.close()
            if self.timed_out or self.findings:
                return {}
            text = log_file.read_text(errors="replace")
            if not failed:
                return {"so_path": so, "variant": label, "objects_reused": reused,
                        "pch": self.pch is not None and "not used because" not in text}
            if last:
                return {}
            stop, why = variant_failure_is_final(label, text, full_fallback)
            if stop:
                self.say(text)
                self.say(f"[verifier] the {label} build failed ({failed}); not rebuilt unchanged: {why}")
                return {"fallback_skipped": why == FALLBACK_OFF}
            self.say(f"[verifier] the {label} build failed ({failed}); building the sources unchanged")
        return {}

    def variant(self, label: str, kwargs: dict, out) -> tuple[str, str, int]:
        """One variant: its files, its compile step, its import check; (what failed, "" if nothing; the .so;
        objects reused). Output goes to ``out``."""
        vdir = self.key_dir / label
        c0 = time.thread_time()
        try:
            write_variant(self.key, vdir, kwargs, self.pch, self.slim_pch)
        except Exception:  # noqa: BLE001 - what load_inline raises before its build (no CUDA, no compiler) fails it
            out.write(traceback.format_exc())
            return "writing its build files", "", 0
        finally:
            self.cpu += time.thread_time() - c0
        report = vdir / proc.COMPILE_REPORT
        report.unlink(missing_ok=True)
        rc = self.step(["compile", str(vdir), *self.compile_args], self.compile_env, out, [vdir, *self.compile_rw],
                       [p for p in (self.pch, *self.slim_pch.values()) if p])
        compiled = self.report(report)
        so = sorted(vdir.glob(f"{objcache.MODULE}*.so"))
        if rc != 0 or not compiled.get("ok"):
            return "compile", "", 0
        if not so:
            out.write(f"[verifier] the {label} build produced no shared object\n")
            return "compile", "", 0
        if not self.check(str(so[0]), out):
            return "import check", "", 0
        return "", str(so[0]), int(compiled.get("objects_reused", 0))

    def check(self, so: str, out) -> bool:
        """The import check: without torch, then (if that failed) with torch imported first; the last try's
        output goes to ``out``. Its sandbox may write only a private directory (its report). It runs the candidate's
        static initialisers, so this process holds the host's device locks shared (``HostSettings.code_locks``, a
        bounded wait) from the check's go to its end (``_gate``): no timing window (a reference's, a candidate's) is
        open while the candidate's code runs, and none opens until the process is gone. A static initialiser that
        loads the host (threads spinning while a task's reference is timed, to inflate the candidate's speedup) gets
        the cores of no timing, and at most ``CHECK_CPU_S`` CPU-seconds. What comes before the go (Python's start,
        torch's libraries loaded, torch imported on the second try: the verifier's code, a second and more) holds
        nothing: held throughout, the checks were a sixth of the timers' waits on one H200."""
        tmp = Path(_mkdtemp(prefix="km-check-"))
        rw = tmp / "rw"
        rw.mkdir()
        locks = [device_lock(p) for p in self.host.code_locks]
        try:  # (a lock file that cannot be opened still leaves no temporary directory behind)
            for torch_first in (False, True):
                report = rw / "check.json"
                for f in (report, rw / "ready", rw / "go"):
                    f.unlink(missing_ok=True)
                with open(tmp / "check.log", "w+", errors="replace") as cap:
                    argv = ["check", so, extension_name(self.key), str(report), "--gate"] + \
                        ["--import-torch"] * torch_first
                    try:
                        rc = self.step(argv, self.check_env, cap, [rw], [self.key_dir], cpu_s=CHECK_CPU_S,
                                       on_start=functools.partial(self._gate, rw, locks))
                    finally:
                        for lock in locks:
                            lock.release()
                    ok = rc == 0 and bool(self.report(report).get("ok"))
                    if ok or torch_first or rc is None or self.findings or rc in _CPU_LIMIT_RC:
                        cap.seek(0)
                        out.write(cap.read())
                        if rc in _CPU_LIMIT_RC:
                            out.write(f"[verifier] importing the built module used more than {CHECK_CPU_S} CPU-seconds "
                                      "(its static initialisers compute or spin at import) and was stopped\n")
                        elif not ok and rc is not None:
                            out.write(f"[verifier] the built module failed to import (exit status {rc})\n")
                        elif ok and torch_first:
                            out.write(f"[verifier] {TORCH_FIRST}\n")
                        return ok
        finally:
            for lock in locks:
                lock.close()
            shutil.rmtree(tmp, ignore_errors=True)
        return False

    def _gate(self, rw: Path, locks: list, proc: subprocess.Popen) -> None:
        """The import check's gate (verifier/build/proc.py ``--gate``): once it is ready to load the module, the device
        locks are taken and it is told to go. Returns at once where the process ended, or the build's deadline passed,
        before it was ready. Raises ``CodeLocksBusy`` (the step then ends the process) where a lock is not had before
        the build's deadline less ``CHECK_RESERVE_S``, or within ``CHECK_LOCK_MIN_S`` where that is later: the
        candidate's code never runs without them. A check that had them late still gets ``CHECK_RESERVE_S`` to run."""
        while not (rw / "ready").exists():
            if proc.poll() is not None or time.monotonic() > self.deadline:
                return
            time.sleep(0.002)
        for lock in locks:
            before = lock.waited_s
            got = lock.acquire(False, max(self.deadline - time.monotonic() - CHECK_RESERVE_S, CHECK_LOCK_MIN_S))
            self.lock_wait += lock.waited_s - before
            if not got:
                raise CodeLocksBusy(f"the host's device lock {getattr(lock, 'path', '')} was not free within "
                                    f"{lock.waited_s - before:.0f} s for the import check, which runs the candidate's "
                                    "static initialisers only with every timing window closed")
        self.deadline = max(self.deadline, time.monotonic() + CHECK_RESERVE_S)  # the check's run, after our wait
        (rw / "go").write_text("")

    def report(self, path: Path) -> dict:
        """A step's report (verifier/build/proc.py); its CPU seconds are added to the build's."""
        try:
            d = json.loads(path.read_text())
            self.cpu += float(d.get("cpu_s") or 0.0)
            return d
        except (OSError, ValueError, TypeError, AttributeError):
            return {}

    def step(self, argv: list[str], env: dict, out, writable: list, read_only: list = (),
             cpu_s: int = 0, on_start: Callable[[subprocess.Popen], None] | None = None) -> int | None:
        """``python -m verifier.build.proc ARGV``, output to ``out``, sandboxed where bubblewrap runs; its exit
        status, or None when the build's deadline killed it (``timed_out``); sandbox findings go to ``findings``.
        ``cpu_s``: a limit on the CPU-seconds of each process of the step (RLIMIT_CPU, which every process it starts
        inherits as its own count), none when 0. The import check is one Python process; one that forks is a sandbox
        finding (C17) in the same step."""
        cmd = [sys.executable, "-m", "verifier.build.proc", *argv]
        jail = BuildSandbox(writable, self.host, read_only) if sandbox.enabled(self.host) else None
        if jail:
            cmd, env = jail.argv(cmd, env), {}
        out.flush()
        start = jail.preexec if jail else (lambda: priority.lower(COMPILE_NICE))

        def preexec() -> None:
            start()
            if cpu_s:
                resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
        try:
            # compilers run niced: execution children (which feed the GPU and take timings) come first
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                    preexec_fn=preexec, pass_fds=jail.pass_fds if jail else ())
        except BaseException:
            if jail:
                jail.started()
                jail.finish()
            raise
        if jail:
            jail.started()
        def end() -> None:  # bubblewrap: the sandbox's processes die with it
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

        try:
            if on_start is not None:
                on_start(proc)
            rc = proc.wait(timeout=max(self.deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            end()
            self.timed_out, rc = True, None
        except BaseException:  # on_start's own failure (the gate): the step's process ends with it
            end()
            if jail:
                jail.finish()
            raise
        if jail:
            self.findings += jail.finish()
        return rc


class BuildSandbox:
    """The sandbox of one build step (verifier/common/sandbox.py) under ``host``'s settings: writable only
    ``writable``, ``read_only`` bound read-only; the ``--supervise`` wrapper ends and reports whatever the step left."""

    def __init__(self, writable: list, host: HostSettings, read_only: list = ()):
        self.host = host
        for p in writable:
            Path(p).mkdir(parents=True, exist_ok=True)
        # the device nodes too: a static initialiser may touch the GPU (as in the execution process), and nvcc's
        # -arch=native asks the device
        self.box = sandbox.Sandbox(Path(_mkdtemp(prefix="km-sbx-build-")), writable=[str(p) for p in writable],
                                   host=host, read_only=[str(p) for p in read_only],
                                   gpu=Path("/dev/nvidiactl").exists())
        self.limit = sandbox.PidsLimit(host.sandbox_pids)
        self.read_fd, self.write_fd = os.pipe()
        self.pass_fds = (self.write_fd,)

    def argv(self, cmd: list, env: dict) -> list:
        # in the session ``run`` starts (its priority: verifier/common/priority.py)
        return self.box.argv(sandbox.supervise_argv(self.write_fd, cmd, self.host),
                             dict(env, **{childenv.SANDBOXED: "1"}), new_session=False)

    def preexec(self) -> None:
        priority.lower(COMPILE_NICE)
        self.limit.enter()

    def started(self) -> None:
        os.close(self.write_fd)

    def finish(self) -> list[str]:
        with os.fdopen(self.read_fd) as f:
            text = f.read()
        try:
            found = json.loads(text) if text.strip() else []
        except ValueError:
            found = []
        found += [f"wrote {p} (outside the directories a build step may write; the write went to a discarded copy)"
                  for p in self.box.outside_writes()[:10]]
        if self.limit.hits():
            found.append(f"the process limit ({self.host.sandbox_pids} processes and threads) was hit: a fork bomb")
        self.box.remove()
        self.limit.remove()
        return found


def _mkdtemp(prefix: str) -> str:
    return tempfile.mkdtemp(prefix=prefix, dir=sandbox._scratch_base())


def write_variant(key: str, out_dir: Path, kwargs: dict, pch: Path | None,
                  slim_pch: Path | dict[str, Path | None] | None = None) -> None:
    """What a variant's ``load_inline`` writes into ``out_dir`` (sources, build.ninja; ninja not run): against
    the PCH if any; under one module name for every build, so that the binding file's text (and object) depends
    on the spec alone; the .so exports its init function under the spec's own name too, which loads it (two
    extensions of one candidate process cannot share a module name). A host unit that starts with slim's head
    (verifier/build/slim.py) includes it from ``slim_pch``, its precompiled header, where there is one: the same
    lines, read from the header file beside the .gch where GCC does not take that."""
    kw = dict(kwargs)
    host = kw.pop("host_source", None)
    if pch is not None:
        kw["extra_cflags"] = list(kw.get("extra_cflags") or []) + [f"-I{pch}", "-Winvalid-pch"]
    heads = slim_pch if isinstance(slim_pch, dict) else {SLIM_HEAD: slim_pch}  # a path: SLIM_HEAD's
    head = next((h for h, d in heads.items() if d is not None and host is not None and host.startswith(h)), None)
    if head is not None:
        host = f"#include <{SLIM_HEADERS[head][0]}>\n" + host[len(head):]
        kw["extra_cflags"] = list(kw.get("extra_cflags") or []) + [f"-I{heads[head]}"]
    kw["extra_ldflags"] = list(kw.get("extra_ldflags") or []) + [
        f"-Wl,--defsym=PyInit_{extension_name(key)}=PyInit_{objcache.MODULE}"]
    write_build_files(out_dir, objcache.MODULE, verbose=True, **kw)
    if host is not None:
        add_host_unit(out_dir, host)


def add_host_unit(out_dir: Path, text: str) -> None:
    """A split variant's third translation unit (verifier/build/split.py): HOST_FILE beside main.cpp, compiled
    by main.cpp's rule (the same compiler, flags and precompiled header) and linked with the other objects."""
    (out_dir / HOST_FILE).write_text(text)
    ninja = out_dir / "build.ninja"
    lines = ninja.read_text().splitlines()
    link = next(i for i, ln in enumerate(lines) if re.match(r"build \S+\.so: link ", ln))
    main = next(i for i, ln in enumerate(lines) if re.match(r"build main\.o: compile ", ln))
    path = str(out_dir.resolve() / HOST_FILE).replace("$", "$$").replace(":", "$:").replace(" ", "$ ")
    lines.insert(main + 1, f"build {HOST_OBJECT}: compile {path}")
    lines[link + 1] = lines[link + 1].replace(" link ", f" link {HOST_OBJECT} ", 1)
    ninja.write_text("\n".join(lines) + "\n")


_SYSTEM_LIB = re.compile(r"/(?:usr/)?lib(?:32|64|x32)?(?:/[\w.]+-linux-gnu\w*)?")


@functools.lru_cache(maxsize=1)
def library_dirs() -> tuple[str, ...]:
    """The import check's LD_LIBRARY_PATH: torch's lib directory, the directory of every other shared library
    this process (torch imported) has mapped, the inherited path: what a built module would find in a torch
    process (a CUDA one names libcudart directly). Not the loader's system directories: it searches them anyway,
    and first they would shadow the interpreter's runpath (pyenv's python took the system libpython of its version)."""
    out = [os.path.join(os.path.dirname(os.path.realpath(torch.__file__)), "lib")]
    for line in Path("/proc/self/maps").read_text().splitlines() if os.path.exists("/proc/self/maps") else []:
        fields = line.split(None, 5)  # address perms offset dev inode [path]
        path = fields[5].strip() if len(fields) == 6 else ""
        if path.startswith("/") and ".so" in os.path.basename(path) and not _SYSTEM_LIB.fullmatch(
                os.path.dirname(os.path.realpath(path))):
            out.append(os.path.dirname(path))
    out += os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
    return tuple(dict.fromkeys(d for d in out if d and os.path.isdir(d)))
