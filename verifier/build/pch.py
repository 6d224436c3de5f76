"""The precompiled header of a build's binding file: ``torch/extension.h`` compiled once by GCC per compiler,
torch version and cflags set, under a shared cache directory (``[verify] pch_dir``, default
``~/.cache/kernelmill/pch``; ``[verify] pch = false`` turns it off), so that each candidate's ``main.cpp`` skips parsing
the ~150k lines that header pulls in (verifier/build/pool.py's module docstring says where it is used).

Guarantees: the PCH's compiler and flags are the ones torch itself writes into the ninja file for those kwargs
(read from a probe build stopped before ninja runs, :func:`write_build_files`), so a PCH GCC would reject is not
made for a different flag set; it is built under an flock, at most ``PCH_MAX_FLAG_SETS`` flag sets get one, and a
failed attempt is remembered (``failed``) instead of retried. Exact flags, not the set GCC would accept: GCC uses a
PCH made with ``-O3`` in a ``-O2`` compile, and the object code then differs from the same compile without it, while
with matching flags the two are byte-identical (bench/results/HISTORY.md, tenth session). Not guaranteed: that GCC
uses it (a PCH it rejects is silently skipped, with the header read as usual)."""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

import torch
import torch.utils.cpp_extension as ce

from verifier.common import priority

PCH_MAX_FLAG_SETS = 12  # headers x cflags sets that get one (torch/extension.h's ~0.8 GB, slim's head ~0.3 GB)
# one load_inline at a time in this process: the stop below patches torch's module, and its extension versioner
# would rename a second concurrent extension of the same name (``name_v1``), which the ninja file then builds
_WRITE_LOCK = threading.Lock()
# headers made in the background (``make_in_background``) run below the builds (steps.COMPILE_NICE, 10) and everything
# else: an investment for later builds, made with the CPU the verdicts leave over
BACKGROUND_NICE = priority.BACKGROUND
_BACKGROUND: set = set()  # the compilers making a header in the background now (ended when this process exits)
_STARTED: set = set()  # the (directory, what) this process has started making in the background
_STARTED_LOCK = threading.Lock()


def _compile(cmd: list[str], background: bool) -> subprocess.CompletedProcess:
    """One header's (or the boxed module's) compile: at once, or in the background at ``BACKGROUND_NICE`` in a
    process group of its own that ends with this process (``_end_background``)."""
    if not background:
        return subprocess.run(cmd, capture_output=True, text=True)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=lambda: priority.lower(BACKGROUND_NICE))
    _BACKGROUND.add(p)
    try:
        out, err = p.communicate()
    finally:
        _BACKGROUND.discard(p)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


@atexit.register
def _end_background() -> None:
    for p in list(_BACKGROUND):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass


def _failed(r: subprocess.CompletedProcess) -> bool:
    """A compile that failed on its own (remembered as ``failed``), not one ended by a signal (this process
    exiting): that one is made again next time."""
    return r.returncode > 0


def write_build_files(build_dir: Path, name: str, **kwargs) -> None:
    """What ``load_inline(name=name, build_directory=build_dir, **kwargs)`` writes (the sources and build.ninja),
    the build itself stopped before ninja runs; thread-safe, and always under ``name`` itself (torch's versioner
    forgets it before and after). The caller's lists are left as they were."""

    class _Stop(Exception):
        pass

    def stop(*_a, **_k):
        raise _Stop

    # load_inline inserts its headers into, and appends the module definition to, the lists it is given: a copy,
    # or a second variant written from the same lists (light, then full) gets two PYBIND11_MODULE blocks
    kwargs = {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in kwargs.items()}
    build_dir.mkdir(parents=True, exist_ok=True)
    with _WRITE_LOCK:
        saved = ce._run_ninja_build
        ce._run_ninja_build = stop
        ce.JIT_EXTENSION_VERSIONER.entries.pop(name, None)
        try:
            ce.load_inline(name=name, build_directory=str(build_dir), **kwargs)
        except _Stop:
            pass
        finally:
            ce._run_ninja_build = saved
            ce.JIT_EXTENSION_VERSIONER.entries.pop(name, None)


def _probe_cflags(kwargs: dict, work: Path) -> tuple[str, list[str]] | None:
    """The C++ compiler and cflags torch uses for main.cpp with these kwargs, read from the ninja file it
    writes (the build itself is stopped before it starts)."""
    write_build_files(work, "km_pch_probe", cpp_sources=["int km_probe() { return 0; }"],
                      cuda_sources=(["__global__ void km_probe_k() {}"] if kwargs.get("cuda_sources") else None),
                      extra_cflags=kwargs.get("extra_cflags") or None,
                      extra_include_paths=kwargs.get("extra_include_paths") or None,
                      with_cuda=kwargs.get("with_cuda"))
    ninja = work / "build.ninja"
    if not ninja.is_file():
        return None
    vals = {}
    for line in ninja.read_text().splitlines():
        k, sep, v = line.partition(" = ")
        if sep and k in ("cxx", "cflags", "post_cflags"):
            vals[k] = v
    flags = [f for f in shlex.split(vals.get("cflags", "") + " " + vals.get("post_cflags", ""))
             if not f.startswith("-DTORCH_EXTENSION_NAME=")]
    return vals.get("cxx", "c++"), flags


def pch_signature(kwargs: dict) -> str:
    """The precompiled header's cache key: torch's version and include directory (two environments with the same
    torch version, a second venv, must not share a header compiled against the other's paths, which a sandboxed
    build cannot read), the interpreter's prefix, the flags, include paths and compiler."""
    include = str(Path(torch.__file__).resolve().parent / "include")
    sig = json.dumps({"torch": torch.__version__, "torch_include": include, "python": sys.prefix,
                      "cflags": kwargs.get("extra_cflags") or [], "inc": kwargs.get("extra_include_paths") or [],
                      "cuda": bool(kwargs.get("cuda_sources")), "with_cuda": kwargs.get("with_cuda"),
                      "cxx": os.environ.get("CXX", "")}, sort_keys=True)
    return sig


def pch_key(kwargs: dict) -> str:
    """The directory name of the precompiled header for these arguments (a hash of :func:`pch_signature`)."""
    return hashlib.sha256(pch_signature(kwargs).encode()).hexdigest()[:16]


def _locked(lock, wait: bool) -> bool:
    """The directory's lock taken: waiting for it, or (``wait`` off) only if nobody holds it now."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        return True
    except BlockingIOError:
        return False


def ensure_pch(kwargs: dict, root: Path, header: tuple[str, str] | None = None, wait: bool = True,
               background: bool = False) -> Path | None:
    """A directory under ``root`` (the ``[verify] pch_dir`` cache) holding ``torch/extension.h.gch`` for these
    cflags (built once, under a lock), or None. ``header``: (name, text) of a header of the verifier's own instead
    (verifier/build/slim.py's SLIM_HEADER), written into the directory beside its ``.gch``, which a unit starting
    ``#include <name>`` uses with the directory on its include path. ``wait=False``: None at once where another
    build is making this header now (a build goes on without it, as with ``pch = false``, rather than wait: on a
    cold 2-core machine the first verdict of the default run came at 114 s of the verify stage, all of them waiting
    for the headers). ``background``: its compile at ``BACKGROUND_NICE`` (``make_in_background``)."""

    if sys.platform != "linux":
        return None
    name, text = header or ("torch/extension.h", None)
    sig = _header_signature(kwargs, header)
    d = _header_dir(kwargs, root, header)
    gch = d / (name + ".gch")
    try:
        if (d / "ok").is_file():
            return d
        if (d / "failed").is_file():
            return None
        root.mkdir(parents=True, exist_ok=True)
        if not d.exists() and sum(1 for p in root.iterdir() if p.is_dir()) >= PCH_MAX_FLAG_SETS:
            return None
        gch.parent.mkdir(parents=True, exist_ok=True)
        with open(d / ".lock", "w") as lock:
            if not _locked(lock, wait):
                return None
            if (d / "ok").is_file():
                return d
            if (d / "failed").is_file():
                return None
            probe = _probe_cflags(kwargs, d / "probe")
            if text is None:
                header_file = Path(torch.__file__).parent / "include" / "torch" / "extension.h"
            else:
                header_file = d / name
                header_file.write_text(text)
            if probe is None or not header_file.is_file():
                (d / "failed").write_text(f"no ninja file or no {name}")
                return None
            cxx, flags = probe
            tmp = gch.with_name(gch.name + ".partial")
            cmd = [*cxx.split(), "-x", "c++-header", str(header_file), "-o", str(tmp), *flags]
            r = _compile(cmd, background)
            if r.returncode != 0:
                if _failed(r):
                    (d / "failed").write_text(" ".join(cmd) + "\n" + r.stdout[-4000:] + r.stderr[-4000:])
                return None
            os.replace(tmp, gch)
            # GCC wants the header beside its .gch (ninja's -MMD names it; a rejected PCH falls back to it)
            link = d / name
            if not link.exists():
                link.symlink_to(header_file)
            (d / "signature.json").write_text(sig + "\n" + json.dumps(cmd))
            (d / "ok").write_text("")
            return d
    except OSError:
        return None


def ensure_boxed_module(kwargs: dict, root: Path, wait: bool = True, background: bool = False) -> Path | None:
    """The boxed binding's module object (verifier/build/boxed.py MODULE_SOURCE) compiled once per flag set beside the
    precompiled header of torch/extension.h for these kwargs (the same compiler and flags, main.cpp's, and the
    module name every build has), or None (no header, or its compile failed: remembered). Built by this process, as
    the header is, only for flags ``objcache.cacheable`` accepts; a build's compile step, which may not write here,
    takes it where its binding file's command names this directory (verifier/build/objcache.py). ``wait=False``: None
    at once where another build is making the header or the object now (the build compiles its own module object);
    ``background``: its compile at ``BACKGROUND_NICE``."""
    from verifier.build.boxed import MODULE_FILE, MODULE_OBJECT, MODULE_SOURCE
    from verifier.build.objcache import MODULE

    d = ensure_pch(kwargs, root, wait=wait, background=background)
    if d is None:
        return None
    obj, failed = d / MODULE_OBJECT, d / "boxed_failed"
    try:
        if obj.is_file():
            return obj
        if failed.is_file():
            return None
        with open(d / ".lock", "w") as lock:
            if not _locked(lock, wait):
                return None
            if obj.is_file():
                return obj
            probe = _probe_cflags(kwargs, d / "probe_boxed")
            if probe is None:
                failed.write_text("no ninja file")
                return None
            cxx, flags = probe
            src = d / MODULE_FILE
            src.write_text(MODULE_SOURCE)
            tmp = obj.with_name(obj.name + ".partial")
            cmd = [*cxx.split(), *flags, f"-DTORCH_EXTENSION_NAME={MODULE}", f"-I{d}", "-Winvalid-pch", "-c", str(src),
                   "-o", str(tmp)]
            r = _compile(cmd, background)
            if r.returncode != 0:
                if _failed(r):
                    failed.write_text(" ".join(cmd) + "\n" + r.stdout[-4000:] + r.stderr[-4000:])
                return None
            os.replace(tmp, obj)
            return obj
    except OSError:
        return None


def _header_signature(kwargs: dict, header: tuple[str, str] | None = None) -> str:
    """What a header's directory is keyed by: ``pch_signature``, and for a header of the verifier's own its text."""
    name, text = header or ("torch/extension.h", None)
    return pch_signature(kwargs) + ("" if text is None else "\n" + json.dumps([name, text]))


def _header_dir(kwargs: dict, root: Path, header: tuple[str, str] | None = None) -> Path:
    """The directory under ``root`` of this header for these kwargs (made or not)."""
    return root / hashlib.sha256(_header_signature(kwargs, header).encode()).hexdigest()[:16]


def pch_ready(kwargs: dict, root: Path, header: tuple[str, str] | None = None) -> Path | None:
    """The header's directory (as ``ensure_pch`` returns it) where the header is made, else None at once: nothing
    is made or waited for."""
    if sys.platform != "linux":
        return None
    d = _header_dir(kwargs, root, header)
    return d if (d / "ok").is_file() else None


def boxed_module_made(d: Path | None) -> bool:
    """Whether the boxed binding's module object beside the header in ``d`` was made (or failed: remembered)."""
    from verifier.build.boxed import MODULE_OBJECT

    return d is not None and ((d / MODULE_OBJECT).is_file() or (d / "boxed_failed").is_file())


def make_in_background(kwargs: dict, root: Path, boxed: bool = False,
                       headers: tuple[tuple[str, str], ...] = ()) -> None:
    """Start making what a build of these kwargs would use and finds missing: torch/extension.h's precompiled
    header, then (``boxed``) the boxed binding's module object beside it and the verifier's ``headers`` (slim's
    heads), in a thread of this process, each compile at ``BACKGROUND_NICE``; once per process and flag set, and
    not at all where another process holds the header's lock (it is making it). The builds meanwhile go on without
    them, as with ``pch = false``.

    Why not in the build that first asks: that build then waited for the header on the verdicts' critical path, and
    the header's compile ran above every build (the builds are niced, this process is not). On a cold 2-core machine
    the default run's first verdict came at 111 s of the verify stage, from the build that went without the header
    while the first one made it, and the stage took 192 s, against 90 s and 153 s with ``pch = false``; on a host
    with idle cores the header is made as fast as before."""
    if sys.platform != "linux":
        return
    key = (str(_header_dir(kwargs, root)), boxed, headers)
    with _STARTED_LOCK:
        if key in _STARTED:
            return
        _STARTED.add(key)

    def make() -> None:
        try:
            if ensure_pch(kwargs, root, wait=False, background=True) is None:
                return
            if boxed:
                ensure_boxed_module(kwargs, root, wait=False, background=True)
            for header in headers:
                ensure_pch(kwargs, root, header, wait=False, background=True)
        except Exception:  # noqa: BLE001 - a header is an optimisation: the builds go on without it
            return

    threading.Thread(target=make, name="km-pch-background", daemon=True).start()
