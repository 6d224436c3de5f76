"""Compile only what changed: the object files of a build, cached by content.

A ``load_inline`` build is two translation units and a link: ``main.cpp`` (the binding: the candidate's
``cpp_sources`` and one pybind11 ``m.def`` per exported function, compiled against the precompiled header) and
``cuda.cu`` (the CUDA source), linked into one shared object. Candidates often share the binding file exactly (the
same declarations and function names: model answers to one task mostly do), and every extension of the verifier is
compiled under one fixed module name (``MODULE``), so the binding's text depends on nothing else; the link adds the
spec's own init symbol as an alias (``--defsym``), and the extension is loaded under that name (CPython hands back
the first module loaded under a name, whatever the file). A binding file that only declares the candidate's
functions is built in a form that depends on neither their names nor their types (verifier/build/boxed.py: a
module object shared by every build with the same flags and a per-build shim object of ~1 s), or, where its types
are not all boxed, in a canonical form that does not depend on their names (verifier/build/binding.py), so answers
that differ in names share that object too.

``run_cached(build_dir, cache_dir, ...)`` stands in for torch's ``_run_ninja_build``: it reads each compile command
from the ``build.ninja`` torch wrote (``ninja -t commands -s TARGET``: ninja's own expansion), keys it by the
command (the build directory's path replaced), the text of its input file, the compiler's identity and the
precompiled header it names, reuses a cached object under that key or compiles and stores it, then links per
candidate. A build with any other step (device linking: ``-rdc``) or with flags outside ``CACHEABLE_FLAGS``
(``cacheable``) runs ninja unchanged.

Trust: a key covers everything that decides the object. No candidate-controlled path can be included (the sources
are written by torch into a fresh directory; include paths, ``-include``, plugins and wrappers are not in
``CACHEABLE_FLAGS``, so such builds are not cached), and an object is stored only after its compile succeeded. The
cache lives beside the build root's key directories and is written only by the sandboxed compile step of a
cacheable spec (verifier/build/proc.py), where no candidate code runs; the import check of a built module, which
runs the candidate's static initialisers, cannot write it (verifier/build/steps.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from verifier.build import binding, boxed
from verifier.common import priority

MODULE = "km_ext"  # the module name of every extension the compile pool builds

# flags a candidate may pass (extra_cflags / extra_cuda_cflags / extra_ldflags) and still share objects
CACHEABLE_FLAGS = re.compile(
    r"-O[0-3s]?|-O|--use_fast_math|-use_fast_math|-ffast-math|-funroll-loops|-std=(?:c|gnu)\+\+\d\d|-lineinfo|"
    r"--expt-relaxed-constexpr|--expt-extended-lambda|-Xptxas=?-O[0-3]|-Xptxas|--ptxas-options=-v|-v|-g|-w|"
    r"-Wno-[\w-]+|-Wall|-Wextra|-fPIC|-fopenmp|-march=native|-mavx2|-mfma|-D[A-Za-z_]\w*(?:=[\w.]*)?|"
    r"-U[A-Za-z_]\w*|--restrict|-maxrregcount=\d+|--maxrregcount=\d+|-lcublas|-lcublasLt|-lcudart|-lgomp")


def cacheable(spec: dict) -> bool:
    """Whether a spec's own flags allow sharing objects (no include paths, plugins, wrappers, files). A flag is read
    as the compile command reads it: torch joins a list of flags with spaces into the ninja file, whose commands the
    shell splits, so ``""`` (KernelBench's template passes ``extra_cflags=[""], extra_ldflags=[""]``) is no flag and
    ``"-O3 --use_fast_math"`` is two, each of which must be one the cache allows."""
    if spec.get("extra_include_paths"):
        return False
    flags = [f for k in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags") for f in (spec.get(k) or [])]
    return all(isinstance(f, str) and all(CACHEABLE_FLAGS.fullmatch(t) for t in f.split()) for f in flags)


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


def _pch_dirs(argv: list[str], header: str = "torch/extension.h") -> Iterator[Path]:
    """The include directories (``-I``) of a compile command that hold ``header`` precompiled (``<header>.gch``,
    verifier/build/pch.py), in order."""
    for a in argv:
        if a.startswith("-I") and (Path(a[2:]) / f"{header}.gch").exists():
            yield Path(a[2:])


def object_key(build_dir: Path, cmd: str, inputs: list[str]) -> str:
    argv = shlex.split(cmd)
    pch = [_identity(str(d / "torch" / "extension.h.gch")) for d in _pch_dirs(argv)]
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


def _try(cmd: str, cwd: Path, log: list[str]) -> bool:
    """Run a command whose failure is not the build's: its command line and output go to ``log`` (printed by
    the caller only if all it tried worked)."""
    r = subprocess.run(cmd, shell=True, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    log.append(f"[binding] {cmd}\n{r.stdout.decode(errors='replace')}")
    return r.returncode == 0


def run_ninja(build_dir: str | os.PathLike, error_prefix: str) -> dict:
    """The build as torch's ``_run_ninja_build`` runs it (``ninja -v``, ``-j MAX_JOBS`` where that is set): ninja's
    own output on stdout (``FAILED: target`` and the compiler's). Where the link names the module's init alias
    (``INIT_ALIAS``), the objects are built first and the alias is dropped from build.ninja's ``ldflags`` when none
    of them defines the init function (``link_command``)."""
    jobs = os.environ.get("MAX_JOBS", "")
    build_dir = Path(build_dir)
    ninja = ["ninja", "-v"] + (["-j", jobs] if jobs.isdigit() else [])
    sys.stdout.flush()
    ninja_file = build_dir / "build.ninja"
    text = ninja_file.read_text()
    if INIT_ALIAS.search(text):
        targets = _targets(build_dir)
        objects = [out for out, rule, _i in targets if rule != "link"]
        if objects and len(objects) < len(targets):
            if subprocess.run(ninja + objects, cwd=build_dir).returncode != 0:
                raise RuntimeError(error_prefix)
            if defines([build_dir / o for o in objects], INIT_SYMBOL) is False:
                ninja_file.write_text(INIT_ALIAS.sub("", text))
                print(f"[verifier] no object defines {INIT_SYMBOL} (no pybind11 module: a library of operators, "
                      "is_python_module=False): linked without the init alias", flush=True)
            sys.stdout.flush()
    if subprocess.run(ninja, cwd=build_dir).returncode != 0:
        raise RuntimeError(error_prefix)
    return {"ninja": True}


# The link of every build names the spec's own init function as an alias of the module's (verifier/build/steps.py
# ``write_variant``: ``-Wl,--defsym=PyInit_km_<key>=PyInit_km_ext``). A library with no pybind11 module
# (``load_inline(..., is_python_module=False)``: operators registered with ``TORCH_LIBRARY``, loaded as torch
# loads it, ``torch.ops.load_library``) defines no init function, and the alias would fail its link with
# "undefined symbol `PyInit_km_ext' referenced in expression": there it is dropped. A module that defines one keeps
# the alias, and one imported as a Python module without it fails to import as it does under torch's own build.
INIT_SYMBOL = f"PyInit_{MODULE}"
INIT_ALIAS = re.compile(r"[ \t]?-Wl,--defsym=PyInit_\w+=" + INIT_SYMBOL + r"(?![\w])")


def defines(objects: list[Path], symbol: str, dynamic: bool = False) -> bool | None:
    """Whether one of ``objects`` defines the global ``symbol`` (``dynamic``: in its dynamic symbol table, a shared
    object's exports); None where ``nm`` cannot say (missing, or it fails)."""
    try:
        r = subprocess.run(["nm", "--format=posix", "--defined-only", "--extern-only", *(["-D"] if dynamic else []),
                            *map(str, objects)], capture_output=True, text=True)
    except OSError:
        return None
    if r.returncode != 0:
        return None
    return any(line.split()[0] == symbol for line in r.stdout.splitlines() if line and not line.endswith(":"))


def link_command(build_dir: Path, cmd: str, objects: list[str]) -> str:
    """The link command ``cmd`` as written, less the module's init alias (``INIT_ALIAS``) when none of ``objects``
    defines the init function (a library of operators with no pybind11 module)."""
    if not INIT_ALIAS.search(cmd) or defines([build_dir / o for o in objects], INIT_SYMBOL) is not False:
        return cmd
    print(f"[verifier] no object defines {INIT_SYMBOL} (no pybind11 module: a library of operators, "
          "is_python_module=False): linked without the init alias", flush=True)
    return shlex.join(a for a in shlex.split(cmd) if not INIT_ALIAS.fullmatch(a))


def _cached_object(build_dir: Path, cache_dir: Path, cmd: str, inputs: list[str]) -> tuple[str, Path]:
    key = object_key(build_dir, cmd, inputs)
    return key, cache_dir / f"{key}.o"


def _store(build_dir: Path, out: str, key: str, cache_dir: Path) -> None:
    """Put a compiled object in the cache (atomically: another build may read the key meanwhile)."""
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=f".{key}.", suffix=".tmp")
    os.close(fd)
    shutil.copyfile(build_dir / out, tmp)
    os.replace(tmp, cache_dir / f"{key}.o")


def _compile_cached(build_dir: Path, cache_dir: Path, cmd: str, inputs: list[str], out: str, error_prefix: str,
                    step: str) -> bool:
    """One object through the cache: True when it was taken from the cache, False when compiled (and stored)."""
    key, cached = _cached_object(build_dir, cache_dir, cmd, inputs)
    if cached.is_file():
        shutil.copyfile(cached, build_dir / out)
        print(f"[verifier] {out}: the same object was compiled before (cache {key})", flush=True)
        return True
    _run(cmd, build_dir, error_prefix, out, step)
    _store(build_dir, out, key, cache_dir)
    return False


def _with_input(cmd: str, old: Path, new: Path, out: str, new_out: str) -> str:
    """A compile command with its input file and output object (and the depfile named after it) replaced."""
    argv = shlex.split(cmd)
    swap = {str(old): str(new), out: new_out, f"{out}.d": f"{new_out}.d"}
    return shlex.join(swap.get(a, a) for a in argv)


def _symbols(objects: list[Path], *flags: str) -> list[str]:
    """The symbols ``nm`` lists for ``objects`` (none where nm is missing or fails: the file is then linked as
    written)."""
    try:
        r = subprocess.run(["nm", "--format=posix", *flags, *map(str, objects)], capture_output=True, text=True)
    except OSError:
        return []
    if r.returncode != 0:
        return []
    return [line.split()[0] for line in r.stdout.splitlines() if line and not line.endswith(":")]


@dataclass
class _Canonical:
    """A build's binding file in its canonical form: its object's cache key, the lock that keeps two builds from
    compiling the same object at once, and the log printed only if the canonical link works."""

    canon: binding.CanonicalBinding
    src: Path  # the file as written
    out: str  # the binding's object (main.o)
    written_cmd: str  # the file's compile command as ninja would run it
    cmd: str  # the compile command of the canonical file
    key: str
    lock: int  # file descriptor of the key's lock file
    log: list[str]
    hit: bool = False
    kind: str = "canonical"
    prebuilt: Path | None = None  # taken instead of the cache's object where set (the boxed form's: _Boxed)


_IDENTIFIER = re.compile(rb"[A-Za-z_]\w*")


def header_identifiers(build_dir: Path, cache_dir: Path, cmd: str, src: Path, includes: tuple[str, ...],
                       globals_only: bool = False) -> set[str]:
    """Every identifier in the headers ``includes`` preprocessed with the flags of compile command ``cmd`` (input
    ``src``), macro names included (``-dD``); with ``globals_only``, those at global scope
    (:func:`global_identifiers`). Both kept in the cache per flags and headers. Empty when the headers do not
    preprocess (the shared forms' compiles then fail as well)."""
    drop_next = {"-MF", "-o"}
    argv, skip = [], False
    for a in shlex.split(cmd):
        if skip or a in drop_next or a in ("-MMD", "-c", "-Winvalid-pch") or a == str(src):
            skip = a in drop_next
            continue
        argv.append(a)
    headers = build_dir / binding.HEADERS_FILE
    argv += ["-E", "-dD", "-P", str(headers)]
    key = hashlib.sha256(json.dumps({"argv": [a.replace(str(build_dir), "@BUILD@") for a in argv],
                                     "headers": list(includes), "tool": _identity(argv[0])}).encode()).hexdigest()[:32]
    suffix = ".globals" if globals_only else ".idents"
    wanted = cache_dir / f"{key}{suffix}"
    if wanted.is_file():
        return set(wanted.read_text().split())
    headers.write_text("".join(f"#include <{h}>\n" for h in includes))
    try:
        r = subprocess.run(argv, cwd=build_dir, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except OSError:
        return set()
    if r.returncode != 0:
        return set()
    found = {m.decode() for m in set(_IDENTIFIER.findall(r.stdout))}
    computed = {".globals": global_identifiers(r.stdout, found), ".idents": found}
    for kept, names in computed.items():
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=f".{key}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(sorted(names)))
        os.replace(tmp, cache_dir / f"{key}{kept}")
    return computed[suffix]


_GLOBAL_TOKEN = re.compile(rb'^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*).*$|^[ \t]*#.*$|"(?:[^"\\\n]|\\.)*"|'
                           rb"'(?:[^'\\\n]|\\.)*'|[A-Za-z_]\w*|[{}]", re.M)


def global_identifiers(preprocessed: bytes, every: set[str]) -> set[str]:
    """The identifiers that appear at global scope in preprocessed text (``-dD``: every macro name too): outside
    every brace but an ``extern "C" { }`` block's. A superset of the names the headers declare in the global
    namespace (types and parameter names of global declarations come along); ``every`` (all identifiers) where a
    ``using namespace`` at global scope makes other namespaces' names global too."""
    out: set[str] = set()
    depth, linkage, prev = 0, [], [b"", b""]
    for m in _GLOBAL_TOKEN.finditer(preprocessed):
        if m.group(1):  # a macro is global wherever it is defined
            out.add(m.group(1).decode())
            continue
        t = m.group(0)
        if t[:1] == b"#" or t[:1].isspace():  # another directive (its text is no code)
            continue
        if t == b"{":
            transparent = prev[0] == b"extern" and prev[1][:1] == b'"'
            linkage.append(transparent)
            depth += 0 if transparent else 1
        elif t == b"}":
            if not linkage:
                return set(every)  # braces this reading does not pair: nothing is known
            depth -= 0 if linkage.pop() else 1
        elif depth == 0 and t[:1] not in (b'"', b"'"):
            if t == b"namespace" and prev[1] == b"using":
                return set(every)
            out.add(t.decode())
        prev = [prev[1], t]
    return out if not linkage else set(every)


def _canonical_form(build_dir: Path, cache_dir: Path, out: str, src: str) -> _Canonical | None:
    """The binding file's canonical form (verifier/build/binding.py) written beside it; None when it has none, or when
    the headers it includes use one of its function names for anything (binding.names_clear_of)."""
    src_path = Path(build_dir, src)
    canon = binding.canonical_binding(src_path.read_text(errors="replace"))
    if canon is None:
        return None
    written_cmd = _command(build_dir, out)
    idents = header_identifiers(build_dir, cache_dir, written_cmd, src_path, canon.includes)
    if not idents or not binding.names_clear_of(canon, idents):
        return None
    canon_src = build_dir / binding.CANONICAL_FILE
    canon_src.write_text(canon.text)
    (build_dir / binding.NAMES_FILE).write_text(canon.names_source)
    cmd = _with_input(written_cmd, src_path, canon_src, out, out)
    key, _ = _cached_object(build_dir, cache_dir, cmd, [canon_src.name])
    lock = os.open(cache_dir / f".{key}.lock", os.O_CREAT | os.O_RDWR, 0o644)
    return _Canonical(canon, src_path, out, written_cmd, cmd, key, lock, [])


def _canonical_object(build_dir: Path, cache_dir: Path, c: _Canonical, wait: bool) -> bool | None:
    """The shared object of a binding form (canonical or boxed) in place: True (from the cache, or compiled and
    stored), False (its compile failed, now or before: nothing printed; the failure is kept, ``<key>.failed``, so
    no other build pays it again), None when ``wait`` is off and another build is compiling the same object right
    now (the caller builds its other objects first and asks again)."""
    try:
        fcntl.flock(c.lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return None
    try:
        cached, failed = cache_dir / f"{c.key}.o", cache_dir / f"{c.key}.failed"
        cached = c.prebuilt or cached
        if cached.is_file():
            shutil.copyfile(cached, build_dir / c.out)
            c.hit = True
            c.log.append(f"[verifier] {c.out}: the binding file's {c.kind} form was compiled before (cache {c.key})\n")
            return True
        if failed.is_file():  # the same command failed before: the next form, without paying the compile again
            return False
        # the module object every build of these flags waits for (compiled once a machine) at the priority of the
        # work its verdicts wait beside, not below it (verifier/common/priority.py)
        with priority.session_at(0, strict=False) if c.kind == "boxed" else contextlib.nullcontext():
            ok = _try(c.cmd, build_dir, c.log)
        if not ok:
            failed.write_text(c.log[-1][-4000:])
            return False
        _store(build_dir, c.out, c.key, cache_dir)
        return True
    finally:
        fcntl.flock(c.lock, fcntl.LOCK_UN)


def _canonical_link(build_dir: Path, c: _Canonical, others: list[str], link: str) -> bool:
    """The names file compiled and linked with the canonical object, each ``km_f<i>`` mapped onto the
    candidate's function (``--defsym``); False, having printed nothing, when the other objects do not define
    what the file declares or a step fails."""
    names_cmd = _with_input(c.written_cmd, c.src, build_dir / binding.NAMES_FILE, c.out, binding.NAMES_OBJECT)
    if not _try(names_cmd, build_dir, c.log):
        return False
    aliases = binding.link_aliases(c.canon, _symbols([build_dir / c.out], "--undefined-only"),
                                   set(_symbols([build_dir / o for o in others], "--defined-only", "--extern-only")))
    argv = shlex.split(_command(build_dir, link))
    if aliases is None or c.out not in argv:
        return False
    at = argv.index(c.out) + 1
    if not _try(shlex.join(argv[:at] + [binding.NAMES_OBJECT] + argv[at:] + aliases), build_dir, c.log):
        return False
    sys.stdout.write("".join(c.log))
    sys.stdout.flush()
    return True


@dataclass
class _Boxed:
    """A build's binding file in the boxed form (verifier/build/boxed.py): the shared module object's cache key and
    lock (the fields ``_canonical_object`` reads), the shim object's command, the log printed only if it links."""

    form: boxed.BoxedBinding
    main_out: str  # the binding file's object (main.o), which the two objects replace in the link
    cmd: str  # the module object's compile command
    shim_cmd: str
    key: str
    lock: int
    log: list[str]
    out: str = boxed.MODULE_OBJECT
    hit: bool = False
    kind: str = "boxed"
    prebuilt: Path | None = None  # the pool's, beside the precompiled header: taken instead of the cache's


def _boxed_form(build_dir: Path, cache_dir: Path, out: str, src: str) -> _Boxed | None:
    """The binding file's boxed form written beside it, or None where it has none (its types, or a name the
    headers use for anything: the shim declares the file's own names)."""
    src_path = Path(build_dir, src)
    declared = binding.read_declared(src_path.read_text(errors="replace"))
    form = boxed.boxed_of(declared) if declared is not None else None
    if form is None:
        return None
    written_cmd = _command(build_dir, out)
    # the shim calls ``::name``: only a name the headers declare at global scope could be another function there
    idents = header_identifiers(build_dir, cache_dir, written_cmd, src_path, form.includes, globals_only=True)
    if not idents or any(n in idents for n in form.names):
        return None
    (build_dir / boxed.MODULE_FILE).write_text(boxed.MODULE_SOURCE)
    (build_dir / boxed.SHIM_FILE).write_text(boxed.shim_source(form, _slim_head(shlex.split(written_cmd))))
    cmd = _with_input(written_cmd, src_path, build_dir / boxed.MODULE_FILE, out, boxed.MODULE_OBJECT)
    shim_cmd = _with_input(written_cmd, src_path, build_dir / boxed.SHIM_FILE, out, boxed.SHIM_OBJECT)
    key, _ = _cached_object(build_dir, cache_dir, cmd, [boxed.MODULE_FILE])
    lock = os.open(cache_dir / f".{key}.lock", os.O_CREAT | os.O_RDWR, 0o644)
    return _Boxed(form, out, cmd, shim_cmd, key, lock, [], prebuilt=_prebuilt_module(written_cmd))


def _slim_head(argv: list[str]) -> str:
    """The name of a split host unit's precompiled head (``boxed.SLIM_HEAD_FILES``) that one of the compile command's
    include directories holds precompiled, else ""."""
    for a in argv:
        for name in boxed.SLIM_HEAD_FILES:
            if next(_pch_dirs([a], name), None) is not None:
                return name
    return ""


def _prebuilt_module(cmd: str) -> Path | None:
    """The module object the compile pool built beside the precompiled header this compile command names
    (verifier/build/pch.py ``ensure_boxed_module``: the same compiler, flags and module name), if there is one."""
    d = next(_pch_dirs(shlex.split(cmd)), None)
    if d is None or not (d / boxed.MODULE_OBJECT).is_file():
        return None
    return d / boxed.MODULE_OBJECT


def _boxed_link(build_dir: Path, cache_dir: Path, b: _Boxed, others: list[str], link: str) -> bool | None:
    """The shim object (from the cache, or compiled and stored) linked with the module object in place of the
    binding file's; False, having printed nothing, when a step fails, and None when the other objects do not
    define every function the file declares (the file as written would link, and fail to load: it is built so,
    and no other shared form would link either)."""
    key, cached = _cached_object(build_dir, cache_dir, b.shim_cmd, [boxed.SHIM_FILE])
    if cached.is_file():
        shutil.copyfile(cached, build_dir / boxed.SHIM_OBJECT)
    elif _try(b.shim_cmd, build_dir, b.log):
        _store(build_dir, boxed.SHIM_OBJECT, key, cache_dir)
    else:
        return False
    undefined = _symbols([build_dir / boxed.SHIM_OBJECT], "--undefined-only")
    defined = set(_symbols([build_dir / o for o in others], "--defined-only", "--extern-only"))
    for name in b.form.names:
        prefix = f"_Z{len(name)}{name}"
        mine = [s for s in undefined if s.startswith(prefix) and not s[len(prefix):][:1].isdigit()]
        if len(mine) != 1 or mine[0] not in defined:
            return None
    argv = shlex.split(_command(build_dir, link))
    if b.main_out not in argv:
        return False
    at = argv.index(b.main_out)
    if not _try(shlex.join(argv[:at] + [boxed.MODULE_OBJECT, boxed.SHIM_OBJECT] + argv[at + 1:]), build_dir, b.log):
        return False
    sys.stdout.write("".join(b.log) + (f"[verifier] {b.main_out}: the binding file in its boxed form (module object "
                                       f"{'from the cache' if b.hit else 'compiled'}, cache {b.key})\n"))
    sys.stdout.flush()
    return True


def _started(build_dir: Path, cache_dir: Path, form):
    """A shared form's object asked for without waiting: (form, True) in place, (form, None) another build is
    compiling it, (None, False) no form or its compile failed (its lock let go)."""
    if form is None:
        return None, False
    ready = _canonical_object(build_dir, cache_dir, form, wait=False)
    if ready is False:
        os.close(form.lock)
        return None, False
    return form, ready


def run_cached(build_dir: str | os.PathLike, cache_dir: str | os.PathLike, error_prefix: str = "Error building",
               canonical_binding: bool = True, boxed_binding: bool = True) -> dict:
    """Build what torch's build.ninja in ``build_dir`` describes, reusing cached objects; returns
    ``{"hits": [...], "misses": [...]}`` (object names; ``"binding": "canonical"`` when the binding file was
    compiled in its canonical form), or ``{"ninja": True}`` when it ran ninja as is.

    The binding file (``main.cpp``) is built in a shared form (``canonical_binding=False``, the ``[verify]`` key:
    never) when it has one: first the boxed form (verifier/build/boxed.py: one module object per compile command,
    whatever the candidate's names and types, and a small shim object of its own; ``boxed_binding=False`` skips
    it), then the canonical form (verifier/build/binding.py: one object per declared signature set, whatever the
    candidate's names). A build that finds another compiling the shared object builds its other objects first,
    then takes it from the cache. When a form fails to compile or link, or the other objects do not define what
    the file declares, the next is tried, the last the file as written, whose log and module are those of the
    unchanged build."""
    build_dir, cache_dir = Path(build_dir), Path(cache_dir)
    targets = _targets(build_dir)
    compiles = [t for t in targets if t[1] in ("compile", "cuda_compile")]
    links = [t for t in targets if t[1] == "link"]
    if len(links) != 1 or len(compiles) + 1 != len(targets):
        return run_ninja(build_dir, error_prefix)
    cache_dir.mkdir(parents=True, exist_ok=True)
    stats: dict = {"hits": [], "misses": []}
    n = len(targets)
    mains = [t for t in compiles if t[1] == "compile" and len(t[2]) == 1 and Path(t[2][0]).name == "main.cpp"]
    boxed_form, canonical, ready = None, None, None
    for i, (out, _rule, inputs) in enumerate(compiles):
        if canonical_binding and len(mains) == 1 and out == mains[0][0]:
            if boxed_binding:
                boxed_form, ready = _started(build_dir, cache_dir, _boxed_form(build_dir, cache_dir, out, inputs[0]))
            if boxed_form is None:
                canonical, ready = _started(build_dir, cache_dir, _canonical_form(build_dir, cache_dir, out, inputs[0]))
            if boxed_form is not None or canonical is not None:
                continue  # its object in place, or another build is compiling it: the other objects first
        hit = _compile_cached(build_dir, cache_dir, _command(build_dir, out), inputs, out, error_prefix,
                              f"[{i + 1}/{n}] ")
        stats["hits" if hit else "misses"].append(out)
    main_pending = boxed_form is not None or canonical is not None
    if boxed_form is not None:
        linked: bool | None = False
        try:
            if ready is None:
                ready = _canonical_object(build_dir, cache_dir, boxed_form, wait=True)
            others = [o for o, _r, _i in compiles if o != boxed_form.main_out]
            linked = _boxed_link(build_dir, cache_dir, boxed_form, others, links[0][0]) if ready else False
            if linked:
                stats["hits" if boxed_form.hit else "misses"].append(boxed.MODULE_OBJECT)
                stats["binding"] = "boxed"
                return stats
        finally:
            os.close(boxed_form.lock)
        # the next form, unless the declarations are not what the other objects define (then none links)
        canonical = _canonical_form(build_dir, cache_dir, mains[0][0], mains[0][2][0]) if linked is False else None
        ready = None
    if canonical is not None:
        try:
            if ready is None:
                ready = _canonical_object(build_dir, cache_dir, canonical, wait=True)
            others = [o for o, _r, _i in compiles if o != canonical.out]
            if ready and _canonical_link(build_dir, canonical, others, links[0][0]):
                stats["hits" if canonical.hit else "misses"].append(canonical.out)
                stats["binding"] = "canonical"
                return stats
        finally:
            os.close(canonical.lock)
    if main_pending:
        out, _rule, inputs = mains[0]  # as written, as the build without the shared forms would
        hit = _compile_cached(build_dir, cache_dir, _command(build_dir, out), inputs, out, error_prefix, f"[1/{n}] ")
        stats["hits" if hit else "misses"].append(out)
    _run(link_command(build_dir, _command(build_dir, links[0][0]), [o for o, _r, _i in compiles]), build_dir,
         error_prefix, links[0][0], f"[{n}/{n}] ")
    return stats
