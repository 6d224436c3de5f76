"""Stage 3, compile: a pool of CPU worker processes that build load_inline extensions into build
directories keyed by the hash of their sources and flags.

Guarantees:
- identical extension specs (sources, exported functions, flags; the ``name`` is ignored) map to one key
  (``spec_key``) and are compiled at most once per build root, across threads (one future per key) and across
  processes (an flock on the key's directory); failures are cached too, with their compiler log
  (``<key>/build.log``, returned);
- each build runs in torch-free processes (verifier/build/proc.py: the compile step, then the import check), in
  process groups under one timeout for the whole build, killed when it runs out; where bubblewrap runs
  (verifier/common/sandbox.py) each step has a sandbox of its own, and the import check can write nothing that
  later builds read;
- faster variants (precompiled header, "bare", "split", "slim", "light") never change what the candidate's code
  means; a variant that fails is followed by the next, the last the unchanged full build, whose log is reported
  (exceptions: a failed binding file or link of any fast variant but split, and ``full_build_fallback = false`` for a bare variant, marked ``fallback_skipped``);
- every variant reads the sources through ``compat_source`` (verifier/common/spec.py): spellings of an older torch
  whose meaning is fixed (``x.type()`` as an AT_DISPATCH argument) are read as today's, and the build log says so.

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

The variants tried in order, and when a failed one is final: verifier/build/variants.py.
"""

from __future__ import annotations

import dataclasses
import fcntl
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
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from verifier.build import objcache, proc
from verifier.build.pch import boxed_module_made, make_in_background, pch_ready, write_build_files
from verifier.build.slim import SLIM_HEAD, SLIM_HEADER, SLIM_HEADERS
from verifier.build.split import HOST_FILE, HOST_OBJECT
from verifier.build.variants import (
    FALLBACK_OFF,
    bare_supported,
    variants_and_rewrites,
    variant_failure_is_final,
)
from verifier.common import childenv, priority, sandbox
from verifier.common.backends import OWN_PREFIX
from verifier.common.config import HostSettings, usable_cores
from verifier.common.devlock import device_lock
from verifier.common.spec import canonical_spec, extension_name, spec_key

OBJECTS_DIR = ".objects"  # under the build root: the object cache (verifier/build/objcache.py)
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


@dataclass
class BuildResult:
    key: str
    ok: bool
    so_path: str = ""
    log: str = ""
    seconds: float = 0.0
    cached: bool = False
    variant: str = ""  # which build produced the .so: bare, split, slim, light or full ("" when it failed)
    pch: bool = False  # the binding file was compiled against the precompiled header
    fallback_skipped: bool = False  # failed in a fast variant, the full build not tried (full_fallback=False)
    objects_reused: int = 0  # object files taken from the object cache (verifier/build/objcache.py), not compiled
    cpu_s: float = 0.0  # CPU seconds (user + system) of the build: its steps (python, compilers) and this thread
    lock_wait_s: float = 0.0  # of ``seconds``: the import checks' waits for the host's device locks (timing windows)
    verifier_error: str = ""  # the verifier's own build code failed (not the candidate's sources): never cached
    timed_out_s: float = 0.0  # killed at this wall-clock limit (0: it ended by itself): never reused (``_usable``)


def _read_result(key_dir: Path) -> BuildResult | None:
    f = key_dir / "result.json"
    if not f.is_file():
        return None
    try:
        d = json.loads(f.read_text())
    except ValueError:
        return None
    log = (key_dir / "build.log").read_text(errors="replace") if (key_dir / "build.log").is_file() else ""
    return BuildResult(key=d["key"], ok=d["ok"], so_path=d.get("so_path", ""), log=log, seconds=d.get("seconds", 0.0),
                       cached=True, variant=d.get("variant", ""), pch=d.get("pch", False),
                       fallback_skipped=d.get("fallback_skipped", False), objects_reused=d.get("objects_reused", 0),
                       cpu_s=d.get("cpu_s", 0.0), lock_wait_s=d.get("lock_wait_s", 0.0),
                       timed_out_s=d.get("timed_out_s", 0.0))


def _write_result(key_dir: Path, res: BuildResult) -> None:
    tmp = key_dir / "result.json.tmp"
    tmp.write_text(json.dumps({"key": res.key, "ok": res.ok, "so_path": res.so_path, "seconds": res.seconds,
                               "variant": res.variant, "pch": res.pch, "fallback_skipped": res.fallback_skipped,
                               "objects_reused": res.objects_reused, "cpu_s": res.cpu_s,
                               "lock_wait_s": res.lock_wait_s, "timed_out_s": res.timed_out_s}))
    os.replace(tmp, key_dir / "result.json")


def _usable(res: BuildResult | None, full_fallback: bool, split: bool = True) -> BuildResult | None:
    """A cached result this request may use: not one that skipped the full build when this one wants it, nor one
    the split variant built when this one turned it off (``[verify] split_build = false``), nor a build killed at its
    time limit: how far a build gets in its wall-clock limit is the host's load as much as the source's cost (on the
    2-core host shared by several verifiers, load 15, an honest extension's first build ran past 300 s, and the kill
    was kept as its compile_error for every later request of the source: docs/ANTI_CHEAT.md class 106). A killed
    step writes no report, so its CPU time is not known to tell the two apart; the next request builds again."""
    if res is None or (full_fallback and res.fallback_skipped) or (not split and res.variant.startswith("split")):
        return None
    if res.timed_out_s:
        return None
    return res


def build_blocking(build_root: str | os.PathLike, args: dict, timeout_s: float, full_fallback: bool = True, *,
                   host: HostSettings) -> BuildResult:
    """Build one spec (or return the cached result) in separate processes; safe across processes.
    ``full_fallback=False``: a failed fast variant is final (module docstring). ``host`` (``VerifyConfig.host()``):
    the precompiled-header cache, the binding's form, the sandbox and its limits of this build's processes."""
    key = spec_key(args)
    key_dir = Path(build_root) / key
    key_dir.mkdir(parents=True, exist_ok=True)
    done = _usable(_read_result(key_dir), full_fallback, host.split_build)
    if done:
        return done
    with open(key_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = _usable(_read_result(key_dir), full_fallback, host.split_build)
        if done:
            return done
        spec = canonical_spec(args)
        (key_dir / "spec.json").write_text(json.dumps(spec))
        t0 = time.perf_counter()
        (key_dir / sandbox.EVIDENCE_FILE).unlink(missing_ok=True)
        with open(key_dir / "build.log", "w") as log:
            build = _Build(key, key_dir, objects_root(build_root), log, host)
            try:
                got = build.run(spec, timeout_s, full_fallback)
            except Exception as e:  # noqa: BLE001 - the verifier's own code failed: not the candidate's compile error
                log.write(traceback.format_exc())
                return BuildResult(key=key, ok=False, log=traceback.format_exc()[-3000:], seconds=time.perf_counter() - t0,
                                   verifier_error=f"{type(e).__name__}: {str(e)[:300]}")
            if build.timed_out:
                log.write(f"\n[verifier] compilation timed out after {timeout_s:.0f} s and was killed\n")
            if build.findings:
                sandbox.write_findings(key_dir, build.findings)
                log.write("\n" + sandbox.describe(build.findings) + "\n")
        _redact_log(key_dir)
        ok = bool(got.get("so_path")) and not build.timed_out and not build.findings
        res = BuildResult(key=key, ok=ok, so_path=got["so_path"] if ok else "", seconds=time.perf_counter() - t0,
                          log=(key_dir / "build.log").read_text(errors="replace"),
                          variant=got["variant"] if ok else "", pch=bool(got.get("pch")) and ok,
                          fallback_skipped=bool(got.get("fallback_skipped")) and not ok,
                          objects_reused=int(got.get("objects_reused", 0)) if ok else 0, cpu_s=round(build.cpu, 3),
                          lock_wait_s=round(build.lock_wait, 3), timed_out_s=timeout_s if build.timed_out else 0.0)
        _write_result(key_dir, res)
        return res


# OMP_NUM_THREADS=1: nothing in a build computes (torch's import, where the import check still does it, with a thread
# per core cost 6.5-7.5 CPU-s against 4.9 s with one on the 16-core H100 box); MAX_JOBS=1: one compiler per build
STEP_ENV = {"MAX_JOBS": "1", "OMP_NUM_THREADS": "1"}
TORCH_FIRST = "the built module imported only with torch imported first"


def slim_heads(variants: list[tuple[str, dict]]) -> dict:
    """The slim heads (verifier/build/slim.py) a build's variants start a host unit with: head -> its header."""
    return {head: header for head, header in SLIM_HEADERS.items()
            if any(str(kw.get("host_source", "")).startswith(head) for _, kw in variants)}


class _Build:
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
        jail = _BuildSandbox(writable, self.host, read_only) if sandbox.enabled(self.host) else None
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


class _BuildSandbox:
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


def _redact_log(key_dir: Path) -> None:
    """The build log as it may be quoted: text of files outside the candidate's sources withheld."""
    f = key_dir / "build.log"
    if f.is_file():
        text = f.read_text(errors="replace")
        clean = sandbox.redact_compiler_log(text, [str(key_dir)])
        if clean != text:
            f.write_text(clean)


class CompilePool:
    """Parallel builds: ``submit(args)`` returns a Future[BuildResult]; one future per key. Every build of the pool
    runs with the host settings ``host`` it was made with (``build_blocking``), whatever other pools in this process
    use."""

    def __init__(self, build_root: str | os.PathLike, workers: int = 0, timeout_s: float = 300.0,
                 full_fallback: bool = True, *, host: HostSettings):
        self.build_root = Path(build_root)
        self.host = host
        self.full_fallback = full_fallback
        self.build_root.mkdir(parents=True, exist_ok=True)
        self.workers = workers or usable_cores()
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="km-compile")
        self._futures: dict[str, Future] = {}
        self._lock = threading.Lock()

    def submit(self, args: dict) -> Future:
        key = spec_key(args)
        with self._lock:
            fut = self._futures.get(key)
            if fut is None:
                fut = self._pool.submit(build_blocking, self.build_root, args, self.timeout_s, self.full_fallback,
                                        host=self.host)
                self._futures[key] = fut
                return fut
        # a second submitter of the same spec shares the build but did not pay for it
        shared: Future = Future()
        fut.add_done_callback(lambda f: shared.set_exception(f.exception()) if f.exception() else
                              shared.set_result(dataclasses.replace(f.result(), cached=True)))
        return shared

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self) -> "CompilePool":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def first_errors(log: str, max_lines: int = 25) -> str:
    """The first compiler errors of a build log (what a repair turn needs), trimmed; the candidate's kernels
    under the names it wrote them with (not the prefix they were compiled under)."""
    lines = log.replace(OWN_PREFIX, "").splitlines()
    hits = [i for i, ln in enumerate(lines) if "error" in ln.lower() and "Error building extension" not in ln]
    if not hits:
        tail = [ln for ln in lines if ln.strip()][-max_lines:]
        return "\n".join(tail)
    start = max(0, hits[0] - 2)
    picked = [ln for ln in lines[start:] if not ln.startswith(("[", "FAILED:", "ninja:")) or "error" in ln.lower()]
    return "\n".join(picked[:max_lines])


def objects_root(build_root: str | os.PathLike) -> Path:
    """The object cache of a build root (verifier/build/objcache.py): shared by its builds, gone with it."""
    return Path(build_root) / OBJECTS_DIR


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
