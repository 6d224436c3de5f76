"""A build's result (``BuildResult``), kept in its key directory (``result.json`` beside ``build.log``) and read by
later requests of the same spec where it may be reused (``usable``), and what of its log a repair turn quotes
(``first_errors``; ``redact_log``: the text of files outside the candidate's sources withheld)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from verifier.common import sandbox
from verifier.common.backends import OWN_PREFIX


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
    timed_out_s: float = 0.0  # killed at this wall-clock limit (0: it ended by itself): never reused (``usable``)


def read_result(key_dir: Path) -> BuildResult | None:
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


def write_result(key_dir: Path, res: BuildResult) -> None:
    tmp = key_dir / "result.json.tmp"
    tmp.write_text(json.dumps({"key": res.key, "ok": res.ok, "so_path": res.so_path, "seconds": res.seconds,
                               "variant": res.variant, "pch": res.pch, "fallback_skipped": res.fallback_skipped,
                               "objects_reused": res.objects_reused, "cpu_s": res.cpu_s,
                               "lock_wait_s": res.lock_wait_s, "timed_out_s": res.timed_out_s}))
    os.replace(tmp, key_dir / "result.json")


def usable(res: BuildResult | None, full_fallback: bool, split: bool = True) -> BuildResult | None:
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


def redact_log(key_dir: Path) -> None:
    """The build log as it may be quoted: text of files outside the candidate's sources withheld."""
    f = key_dir / "build.log"
    if f.is_file():
        text = f.read_text(errors="replace")
        clean = sandbox.redact_compiler_log(text, [str(key_dir)])
        if clean != text:
            f.write_text(clean)


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
