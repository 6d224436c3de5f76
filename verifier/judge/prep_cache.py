"""Task preparation kept on disk: the reference's timings, measured once per task and device, for every process.

``runs.reference_timing`` (verifier/runs.py) times a task's eager reference and ``torch.compile`` of it, each in a
child of its own (up to ~20 s a task on an H100). Its in-process memo dies with the process; this cache keeps the
figures of each part under the build root as ``<build_root>/prep/<key>.json``, so that the next verifier process
(a restarted RL reward server, another Ray worker, the next bench run) on the same device reads them instead of
measuring again.

The key is content-addressed: sha256 of the part, the task's program text, the backend, the device as the backend
describes it (cuda: name, memory and compute capability; cpu: model and thread count), torch's and CUDA's versions,
every setting the reference's child is given (``settings_read``) and ``SCHEMA``. A different program, device or setting
is another entry; nothing is ever looked up by task name.

Guarantees: an entry holds the timings only (the child's eager and compiled device times, launch times and idle
gaps, the harness's clocked time per call and that of each bracket): never a seed, an input or an output. It is written atomically (a temporary
file, then ``os.replace``); a file that does not parse, has another schema or another key is ignored and
overwritten by the next measurement. A file lock per key makes two processes that need the same task measure it
once: the second waits (bounded) and reads. A timing that failed, or that ran without the device to itself, is
not kept. Not guaranteed: that a kept timing is as quiet as a new one would be (it is the first measurement on
that device, kept; timings differ by noise only) or that anything writable under the build root is trusted more
than the build root itself (execution children see it read-only).
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from verifier.common.config import VerifyConfig
from verifier.common.contract import ChildReport, Job

SCHEMA = 4  # 2: the harness's clocked figures (verifier/execute/harness.py) instead of the child's device times; 3: with
# each bracket's time per call (``eager_samples``, ``compile_samples``: the speedup's interval, verifier/judge/verdict.py);
# 4: a task's timing in two parts, each an entry of its own (the eager model with the null, torch.compile's model)
DIR = "prep"
# the ChildReport fields an entry keeps: what judge.py reads of the reference (timings, their errors, the device)
KEPT = ("kind", "phase_s", "eager", "compiled", "compile_error", "timing_exclusive", "lock_wait_s", "device")


def settings_read(cfg: VerifyConfig) -> dict:
    """The settings that shape the reference's timing: every setting its Job copies from the config, the number
    of timed iterations, whether the device lock is taken and the run timeout (the lock's longest wait)."""
    names = {f.name for f in dataclasses.fields(VerifyConfig)}
    keys = sorted({f.name for f in dataclasses.fields(Job) if f.name in names} |
                  {"timing_trials", "timed_brackets", "timing_budget_s", "device_lock", "run_timeout_s"})
    return {k: getattr(cfg, k) for k in keys}


def entry_key(program: str, backend: str, device: str, cfg: VerifyConfig, part: str) -> str:
    """The content address of one part of a task's reference timing (verifier/runs.py ``EAGER``, ``COMPILED``) on one
    device under one set of settings."""
    material = {"schema": SCHEMA, "part": part, "program": program, "backend": backend, "device": device,
                "torch": torch.__version__, "cuda": torch.version.cuda, "settings": settings_read(cfg)}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def entry_path(build_root: Path, key: str) -> Path:
    return Path(build_root) / DIR / f"{key}.json"


def keepable(report: ChildReport, clocked: dict) -> bool:
    """Whether a part of a reference timing is worth keeping: clocked (the eager model with its null, or the compiled
    model), without error, with the device to itself (a timing shared with another process's work would stay slow
    for every later process)."""
    timed = ((isinstance(clocked.get("eager_s"), float) and bool(clocked.get("null")))
             or isinstance(clocked.get("compile_s"), float))
    return (timed and not report.timing_error and not report.setup_error and not report.compile_error
            and report.timing_exclusive is not False)


def _numbers(clocked: dict) -> bool:
    """Whether the figures are numbers where the judge reads numbers (``held``, what the measurement held the device
    alone for, is a report the verdict carries as it is: a mapping)."""
    if not isinstance(clocked.get("held", {}), dict):
        return False
    vals = [v for k, v in clocked.items() if k not in ("null", "held") and not k.endswith("_samples")]
    vals += list((clocked.get("null") or {}).values())
    for k, v in clocked.items():
        if k.endswith("_samples"):
            if not isinstance(v, list):
                return False
            vals += v
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals)


def read(build_root: Path, key: str) -> tuple[ChildReport, dict] | None:
    """The kept (report, clocked figures) of ``key``; None when there is none or it cannot be used
    (missing, unparsable, another schema or key, a report that does not match ChildReport)."""
    try:
        d = json.loads(entry_path(build_root, key).read_text())
        if d.get("schema") != SCHEMA or d.get("key") != key:
            return None
        report = ChildReport.from_dict(d["report"])
        clocked = d["clocked"]
        if not isinstance(clocked, dict) or not _numbers(clocked):
            return None
        return report, clocked
    except Exception:  # noqa: BLE001 - a corrupt entry is a miss: measured again and rewritten
        return None


def write(build_root: Path, key: str, report: ChildReport, clocked: dict) -> Path:
    """Keep a measured timing (atomically: a reader sees the old file or the whole new one)."""
    full = report.to_dict()
    kept = {k: full[k] for k in KEPT}
    entry = {"schema": SCHEMA, "key": key, "measured_by": {"pid": os.getpid(), "at": round(time.time(), 3)},
             "report": kept, "clocked": clocked}
    path = entry_path(build_root, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(entry, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@contextmanager
def measuring(build_root: Path, key: str, wait_s: float):
    """Held by the process measuring ``key``: another process needing it waits here (at most ``wait_s``, then it
    measures too rather than wait on a stuck neighbour). Yields whether the lock was had."""
    path = entry_path(build_root, key).with_suffix(".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    deadline = time.monotonic() + max(0.0, wait_s)
    held = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
        yield held
    finally:
        if held:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def kept_or_measured(build_root: Path, key: str, wait_s: float, measure, make):
    """The timing of ``key``: ``make(report, clocked)`` from its entry when one is kept, else ``measure()`` (an
    object with those two attributes), kept when ``keepable``. One process measures a key at
    a time; one that waited for another reads what it kept."""
    kept = read(build_root, key)
    if kept is None:
        with measuring(build_root, key, wait_s):
            kept = read(build_root, key)  # measured by another process while this one waited
            if kept is None:
                timing = measure()
                if keepable(timing.report, timing.clocked):
                    write(build_root, key, timing.report, timing.clocked)
                return timing
    return make(*kept)
