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

How one build runs (its variants, the compile step and the import check, each in its own sandbox):
verifier/build/steps.py; its result and what is kept of it: verifier/build/result.py. The variants tried in order,
and when a failed one is final: verifier/build/variants.py.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from verifier.build.result import BuildResult, read_result, redact_log, usable, write_result
from verifier.build.steps import Build
from verifier.common import sandbox
from verifier.common.config import HostSettings, usable_cores
from verifier.common.spec import canonical_spec, spec_key

OBJECTS_DIR = ".objects"  # under the build root: the object cache (verifier/build/objcache.py)


def objects_root(build_root: str | os.PathLike) -> Path:
    """The object cache of a build root (verifier/build/objcache.py): shared by its builds, gone with it."""
    return Path(build_root) / OBJECTS_DIR


def build_blocking(build_root: str | os.PathLike, args: dict, timeout_s: float, full_fallback: bool = True, *,
                   host: HostSettings) -> BuildResult:
    """Build one spec (or return the cached result) in separate processes; safe across processes.
    ``full_fallback=False``: a failed fast variant is final (module docstring). ``host`` (``VerifyConfig.host()``):
    the precompiled-header cache, the binding's form, the sandbox and its limits of this build's processes."""
    key = spec_key(args)
    key_dir = Path(build_root) / key
    key_dir.mkdir(parents=True, exist_ok=True)
    done = usable(read_result(key_dir), full_fallback, host.split_build)
    if done:
        return done
    with open(key_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = usable(read_result(key_dir), full_fallback, host.split_build)
        if done:
            return done
        spec = canonical_spec(args)
        (key_dir / "spec.json").write_text(json.dumps(spec))
        t0 = time.perf_counter()
        (key_dir / sandbox.EVIDENCE_FILE).unlink(missing_ok=True)
        with open(key_dir / "build.log", "w") as log:
            build = Build(key, key_dir, objects_root(build_root), log, host)
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
        redact_log(key_dir)
        ok = bool(got.get("so_path")) and not build.timed_out and not build.findings
        res = BuildResult(key=key, ok=ok, so_path=got["so_path"] if ok else "", seconds=time.perf_counter() - t0,
                          log=(key_dir / "build.log").read_text(errors="replace"),
                          variant=got["variant"] if ok else "", pch=bool(got.get("pch")) and ok,
                          fallback_skipped=bool(got.get("fallback_skipped")) and not ok,
                          objects_reused=int(got.get("objects_reused", 0)) if ok else 0, cpu_s=round(build.cpu, 3),
                          lock_wait_s=round(build.lock_wait, 3), timed_out_s=timeout_s if build.timed_out else 0.0)
        write_result(key_dir, res)
        return res


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
