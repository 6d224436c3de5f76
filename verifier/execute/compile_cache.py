"""What ``torch.compile`` of a task's reference builds once per machine, kept for the next task's compiled part.

A task's compiled reference timing (verifier/runs.py ``compiled_timing``) builds ``torch.compile(model)`` in a
sandboxed execution child whose HOME and TMPDIR are a private scratch emptied after every job
(verifier/common/sandbox.py), so inductor's and triton's caches, which live there by default, started empty for every
task. On the 2-core CPU machine at 8214ab1 a ReLU's compiled part built in 23 s a task: about 11 s of it inductor's
checks of the CPU's vector instruction sets (a small program compiled and loaded per ISA), about 9 s its precompiled
header (~150 MB) made again, and the kernel itself ~2 s. On a GPU host the same scratch held triton's cache (its
driver stub compiled with the host compiler, each kernel's launcher).

Here: the compiled part's job directory gets ``COMPILE_CACHE`` (verifier/common/contract.py), a copy of this machine's
kept cache (``seed``); the child points inductor (``TORCHINDUCTOR_CACHE_DIR``) and triton (``TRITON_CACHE_DIR``) at
it and builds without inductor's precompiled header (verifier/child/reference.py ``build_compiled``; not where the
job directory's filesystem is mounted noexec, where a built library could not be loaded); after a part
that built and timed, the files it added are kept (``keep``) for the next one.

Trust: only reference jobs (the task's own code, no candidate's) get the copy or have their files kept, and what is
kept decides only how fast the compiled model builds: the compiled part's time is the verdict's ``compile_us``, which
no reward reads; the eager time the reward's speedup uses is measured in a job that never reads this cache. A kept
file is a regular file the job wrote (never a link, never over ``MAX_FILE_BYTES``), copied by this process; the kept
cache stops growing at ``MAX_BYTES``. A copy is keyed by torch's version and the host's name (a build root shared by
hosts whose CPUs differ keeps one per host: the ISA checks are the CPU's).

Imports: the standard library (the verifier's CLI and verifier/execute/processes.py stay torch-free).
"""

from __future__ import annotations

import os
import platform
import shutil
import stat
import tempfile
from pathlib import Path

from verifier.common.contract import COMPILE_CACHE

MAX_FILE_BYTES = 16 << 20  # a file larger than this is not kept (a precompiled header, a big fused kernel)
# the kept cache stops growing here: every compiled part copies all of it into its job directory (memory-backed
# /dev/shm), so it holds what the first tasks built (the ISA checks, triton's driver stub, common kernels), not a
# growing history (a task timed again reads its kept timing: verifier/judge/prep_cache.py)
MAX_BYTES = 64 << 20
# lock files; the header the child no longer makes; inductor's whole-graph entries (one task's graph each)
SKIP_PARTS = ("locks", "precompiled_headers", "fxgraph", "aotautograd")
TMP_PREFIX = ".keep-"  # a file being kept (another process's copy in progress): never copied on


def kept_dir(build_root: Path, torch_version: str) -> Path:
    """This host's kept cache for ``torch_version`` under ``build_root``."""
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in platform.node()) or "host"
    return Path(build_root) / "compile-cache" / f"torch-{torch_version}-{host}"


def _files(root: Path):
    """(relative path, size) of every regular file under ``root`` (links and other kinds left out, never followed)."""
    for d, dirs, names in os.walk(root, followlinks=False):
        dirs[:] = [x for x in dirs if x not in SKIP_PARTS and not os.path.islink(os.path.join(d, x))]
        for name in names:
            p = os.path.join(d, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and not name.endswith(".lock") and not name.startswith(TMP_PREFIX):
                yield os.path.relpath(p, root), st.st_size


def seed(job_dir: Path, build_root: Path, torch_version: str) -> Path:
    """``job_dir / COMPILE_CACHE``, made, with a copy of the kept cache (if any) in it: as much of it as could be
    copied (a copy that fails part way costs the build time only, never the task's timing)."""
    dest = Path(job_dir) / COMPILE_CACHE
    kept = kept_dir(build_root, torch_version)
    dest.mkdir(parents=True, exist_ok=True)
    if kept.is_dir():
        for rel, _ in _files(kept):
            try:
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(kept / rel, dest / rel, follow_symlinks=False)
            except OSError:
                continue
    return dest


def keep(job_dir: Path, build_root: Path, torch_version: str) -> int:
    """The files a compiled part's job added to its ``COMPILE_CACHE`` copied into the kept cache (each atomically:
    a reader sees a whole file or none; a shared object last, after the sources beside it); returns how many."""
    src = Path(job_dir) / COMPILE_CACHE
    if not src.is_dir():
        return 0
    kept = kept_dir(build_root, torch_version)
    have = dict(_files(kept)) if kept.is_dir() else {}
    total = sum(have.values())
    new = sorted(((rel, size) for rel, size in _files(src) if rel not in have and size <= MAX_FILE_BYTES),
                 key=lambda f: (f[0].endswith(".so"), f[0]))
    added = 0
    for rel, size in new:
        if total + size > MAX_BYTES:
            break
        target = kept / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=TMP_PREFIX)
        try:
            with os.fdopen(fd, "wb") as out, open(os.open(src / rel, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
                shutil.copyfileobj(f, out)
            os.chmod(tmp, 0o755 if rel.endswith(".so") else 0o644)
            os.replace(tmp, target)
        except OSError:
            Path(tmp).unlink(missing_ok=True)
            continue
        total += size
        added += 1
    return added
