"""Stage 3, compile: a pool of CPU worker processes that build load_inline extensions into build
directories keyed by the hash of their sources and flags.

Guarantees:
- identical extension specs (sources, exported functions, flags; the ``name`` is ignored) map to one
  key and are compiled at most once per build root, across threads (one future per key) and across
  processes (an flock on the key's directory); failures are cached too, with their compiler log;
- each compile runs in its own process group with a wall-clock timeout, and a timed-out group is killed;
- the compiler output of a failure is kept in ``<key>/build.log`` and returned.
It does not sandbox the compiler: flags come from the candidate (see verifier/README.md).

Run as ``python -m verifier.build KEY_DIR`` it is the worker process body: it reads
``KEY_DIR/spec.json``, builds, and exits 0 on success.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

SPEC_KEYS = ("cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags", "extra_ldflags",
             "extra_include_paths", "with_cuda")


def _as_list(v) -> list:
    if v is None:
        return []
    return [v] if isinstance(v, str) else list(v)


def canonical_spec(args: dict) -> dict:
    """load_inline keyword arguments reduced to what determines the built binary (no name)."""
    fns = args.get("functions")
    spec = {
        "cpp_sources": _as_list(args.get("cpp_sources")),
        "cuda_sources": _as_list(args.get("cuda_sources")),
        "functions": fns if isinstance(fns, dict) else _as_list(fns),
        "extra_cflags": _as_list(args.get("extra_cflags")),
        "extra_cuda_cflags": _as_list(args.get("extra_cuda_cflags")),
        "extra_ldflags": _as_list(args.get("extra_ldflags")),
        "extra_include_paths": _as_list(args.get("extra_include_paths")),
        "with_cuda": args.get("with_cuda"),
    }
    return spec


def spec_key(args: dict) -> str:
    """The build key: a hash of the canonical spec, the torch version and the CUDA arch list."""
    import torch

    blob = json.dumps({"spec": canonical_spec(args), "torch": torch.__version__,
                       "arch": os.environ.get("TORCH_CUDA_ARCH_LIST", "")}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def extension_name(key: str) -> str:
    return f"km_{key}"


@dataclass
class BuildResult:
    key: str
    ok: bool
    so_path: str = ""
    log: str = ""
    seconds: float = 0.0
    cached: bool = False


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
                       cached=True)


def _write_result(key_dir: Path, res: BuildResult) -> None:
    tmp = key_dir / "result.json.tmp"
    tmp.write_text(json.dumps({"key": res.key, "ok": res.ok, "so_path": res.so_path, "seconds": res.seconds}))
    os.replace(tmp, key_dir / "result.json")


def build_blocking(build_root: str | os.PathLike, args: dict, timeout_s: float) -> BuildResult:
    """Build one spec (or return the cached result) in a separate process; safe across processes."""
    key = spec_key(args)
    key_dir = Path(build_root) / key
    key_dir.mkdir(parents=True, exist_ok=True)
    done = _read_result(key_dir)
    if done:
        return done
    with open(key_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = _read_result(key_dir)
        if done:
            return done
        (key_dir / "spec.json").write_text(json.dumps(canonical_spec(args)))
        t0 = time.perf_counter()
        env = dict(os.environ, MAX_JOBS="1", PYTHONPATH=os.pathsep.join(
            [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]))
        with open(key_dir / "build.log", "w") as log:
            proc = subprocess.Popen([sys.executable, "-m", "verifier.build", str(key_dir)], stdout=log,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                log.write(f"\n[verifier] compilation timed out after {timeout_s:.0f} s and was killed\n")
                rc = -1
        seconds = time.perf_counter() - t0
        so = sorted(key_dir.glob(f"{extension_name(key)}*.so"))
        ok = rc == 0 and bool(so)
        res = BuildResult(key=key, ok=ok, so_path=str(so[0]) if ok else "", seconds=seconds,
                          log=(key_dir / "build.log").read_text(errors="replace"))
        _write_result(key_dir, res)
        return res


class CompilePool:
    """Parallel builds: ``submit(args)`` returns a Future[BuildResult]; one future per key."""

    def __init__(self, build_root: str | os.PathLike, workers: int = 0, timeout_s: float = 300.0):
        self.build_root = Path(build_root)
        self.build_root.mkdir(parents=True, exist_ok=True)
        self.workers = workers or (os.cpu_count() or 1)
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="km-compile")
        self._futures: dict[str, Future] = {}
        self._lock = threading.Lock()

    def submit(self, args: dict) -> Future:
        key = spec_key(args)
        with self._lock:
            fut = self._futures.get(key)
            if fut is None:
                fut = self._pool.submit(build_blocking, self.build_root, args, self.timeout_s)
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
    """The first compiler errors of a build log (what a repair turn needs), trimmed."""
    lines = log.splitlines()
    hits = [i for i, ln in enumerate(lines) if "error" in ln.lower() and "Error building extension" not in ln]
    if not hits:
        tail = [ln for ln in lines if ln.strip()][-max_lines:]
        return "\n".join(tail)
    start = max(0, hits[0] - 2)
    picked = [ln for ln in lines[start:] if not ln.startswith(("[", "FAILED:", "ninja:")) or "error" in ln.lower()]
    return "\n".join(picked[:max_lines])


def _child_main(key_dir: str) -> int:
    key_dir_p = Path(key_dir)
    spec = json.loads((key_dir_p / "spec.json").read_text())
    from torch.utils.cpp_extension import load_inline

    key = key_dir_p.name
    kwargs = dict(spec)
    if not kwargs["cuda_sources"]:
        kwargs["cuda_sources"] = None
    if not kwargs["functions"]:
        kwargs["functions"] = None
    load_inline(name=extension_name(key), build_directory=str(key_dir_p), verbose=True, **kwargs)
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1]))
