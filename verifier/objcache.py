"""Compile only what changed: the object files of a build, cached by content.

A ``load_inline`` build is two translation units and a link: ``main.cpp`` (the binding: the candidate's
``cpp_sources`` and one pybind11 ``m.def`` per exported function, ~13 s against the precompiled header)
and ``cuda.cu`` (the CUDA source), linked into one shared object. Candidates often share the binding
file exactly (the same declarations and function names: model answers to one task mostly do), and every
extension of the verifier is compiled under one fixed module name (``MODULE``), so the binding's text
depends on nothing else; the link adds the spec's own init symbol as an alias (``--defsym``), and the
extension is loaded under that name (CPython hands back the first module loaded under a name, whatever
the file).

``run_cached(build_dir, cache_dir, ...)`` stands in for torch's ``_run_ninja_build``: it reads each compile
command from the ``build.ninja`` torch wrote (``ninja -t commands -s TARGET``: ninja's own expansion), keys
it by the command (the build directory's path replaced), the text of its input file, the compiler's
identity and the precompiled header it names, reuses a cached object under that key or compiles and
stores it, then links per candidate. A build with any other step (device linking: ``-rdc``) or with
flags outside ``CACHEABLE_FLAGS`` runs ninja unchanged.

Trust: a key covers everything that decides the object: no candidate-controlled path can be included
(the sources are written by torch into a fresh directory; ``-I``/``-include``/plugins/wrappers are not
in ``CACHEABLE_FLAGS``, so such builds are not cached), and an object is stored only after its compile
succeeded. The cache lives beside the build root's key directories and is written only by the sandboxed
compile step of a cacheable spec (verifier/buildproc.py), where no candidate code runs; the import check of a
built module, which runs the candidate's static initialisers, cannot write it (verifier/build.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MODULE = "km_ext"  # the module name of every extension the compile pool builds
OBJ_DIR_ENV = "KM_OBJ_DIR"

# flags a candidate may pass (extra_cflags / extra_cuda_cflags / extra_ldflags) and still share objects
CACHEABLE_FLAGS = re.compile(
    r"-O[0-3s]?|-O|--use_fast_math|-use_fast_math|-ffast-math|-funroll-loops|-std=(?:c|gnu)\+\+\d\d|-lineinfo|"
    r"--expt-relaxed-constexpr|--expt-extended-lambda|-Xptxas=?-O[0-3]|-Xptxas|--ptxas-options=-v|-v|-g|-w|"
    r"-Wno-[\w-]+|-Wall|-Wextra|-fPIC|-fopenmp|-march=native|-mavx2|-mfma|-D[A-Za-z_]\w*(?:=[\w.]*)?|"
    r"-U[A-Za-z_]\w*|--restrict|-maxrregcount=\d+|--maxrregcount=\d+|-lcublas|-lcublasLt|-lcudart|-lgomp")


def cacheable(spec: dict) -> bool:
    """Whether a spec's own flags allow sharing objects (no include paths, plugins, wrappers, files)."""
    if spec.get("extra_include_paths"):
        return False
    flags = [f for k in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags") for f in (spec.get(k) or [])]
    return all(isinstance(f, str) and CACHEABLE_FLAGS.fullmatch(f.strip()) for f in flags)


_BUILD = re.compile(r"^build\s+(\S+?):\s+(\w+)\s+(.*)$")


def _targets(build_dir: Path) -> list[tuple[str, str, list[str]]]:
    """(output, rule, inputs) of each ``build`` line of build.ninja."""
    out = []
    for line in (build_dir / "build.ninja").read_text().splitlines():
        m = _BUILD.match(line.strip())
        if m:
            out.append((m.group(1).replace("$:", ":"), m.group(2),
                        [p.replace("$:", ":").replace("$ ", " ") for p in m.group(3).split()]))
    return out


def _command(build_dir: Path, target: str) -> str:
    return subprocess.run(["ninja", "-t", "commands", "-s", target], cwd=build_dir, capture_output=True, text=True,
                          check=True).stdout.strip()


def _identity(path: str) -> str:
    """What stands for a tool or header file in a key: its resolved path, size and mtime."""
    p = shutil.which(path) or path
    try:
        st = os.stat(p)
        return f"{os.path.realpath(p)}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return p


def object_key(build_dir: Path, cmd: str, inputs: list[str]) -> str:
    argv = shlex.split(cmd)
    pch = [_identity(str(Path(a[2:]) / "torch" / "extension.h.gch")) for a in argv
           if a.startswith("-I") and (Path(a[2:]) / "torch" / "extension.h.gch").exists()]
    blob = {"cmd": cmd.replace(str(build_dir), "@BUILD@"), "tool": _identity(argv[0]) if argv else "",
            "pch": pch, "inputs": [hashlib.sha256(Path(build_dir, i).read_bytes()).hexdigest() for i in inputs]}
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:32]


def _run(cmd: str, cwd: Path, error_prefix: str, target: str = "", step: str = "") -> None:
    """Run one build command, printing as ninja -v does (``[i/n] command``; ``FAILED: target`` and the
    output on failure), so that the build log reads the same with or without the cache (build.failed_targets)."""
    print(f"{step}{cmd}", flush=True)
    r = subprocess.run(cmd, shell=True, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    text = r.stdout.decode(errors="replace")
    if r.returncode != 0:
        text = f"FAILED: {target}\n{cmd}\n{text}ninja: build stopped: subcommand failed.\n"
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()
    if r.returncode != 0:
        raise RuntimeError(f"{error_prefix}: {text}")


def run_ninja(build_dir: str | os.PathLike, error_prefix: str) -> dict:
    """The build as torch's ``_run_ninja_build`` runs it (``ninja -v``, ``-j MAX_JOBS`` where that is set): ninja's
    own output on stdout (``FAILED: target`` and the compiler's)."""
    jobs = os.environ.get("MAX_JOBS", "")
    sys.stdout.flush()
    if subprocess.run(["ninja", "-v"] + (["-j", jobs] if jobs.isdigit() else []), cwd=build_dir).returncode != 0:
        raise RuntimeError(error_prefix)
    return {"ninja": True}


def run_cached(build_dir: str | os.PathLike, cache_dir: str | os.PathLike, error_prefix: str = "Error building") -> dict:
    """Build what torch's build.ninja in ``build_dir`` describes, reusing cached objects; returns
    ``{"hits": [...], "misses": [...]}`` (object names), or ``{"ninja": True}`` when it ran ninja as is."""
    build_dir, cache_dir = Path(build_dir), Path(cache_dir)
    targets = _targets(build_dir)
    compiles = [t for t in targets if t[1] in ("compile", "cuda_compile")]
    links = [t for t in targets if t[1] == "link"]
    if len(links) != 1 or len(compiles) + 1 != len(targets):
        return run_ninja(build_dir, error_prefix)
    cache_dir.mkdir(parents=True, exist_ok=True)
    stats: dict = {"hits": [], "misses": []}
    n = len(targets)
    for i, (out, _rule, inputs) in enumerate(compiles):
        cmd = _command(build_dir, out)
        key = object_key(build_dir, cmd, inputs)
        cached = cache_dir / f"{key}.o"
        if cached.is_file():
            shutil.copyfile(cached, build_dir / out)
            print(f"[verifier] {out}: the same object was compiled before (cache {key})", flush=True)
            stats["hits"].append(out)
            continue
        _run(cmd, build_dir, error_prefix, out, f"[{i + 1}/{n}] ")
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=f".{key}.", suffix=".tmp")
        os.close(fd)
        shutil.copyfile(build_dir / out, tmp)
        os.replace(tmp, cached)
        stats["misses"].append(out)
    _run(_command(build_dir, links[0][0]), build_dir, error_prefix, links[0][0], f"[{n}/{n}] ")
    return stats
