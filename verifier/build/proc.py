"""The two steps of one build variant, each run by verifier/build/pool.py as its own (sandboxed) process; torch-free
(the standard library and verifier.build.objcache), so a step costs a Python start, not torch's import:

    python -m verifier.build.proc compile VARIANT_DIR [--objects DIR] [--as-written]
    python -m verifier.build.proc check SO_PATH MODULE_NAME REPORT [--import-torch] [--gate]

``compile`` builds what the ``build.ninja`` in VARIANT_DIR describes (the verifier's own process wrote it and the
sources, with ``load_inline`` stopped before ninja): through the object cache (``objcache.run_cached``) when
``--objects`` names one (the verifier passes it only for a spec ``objcache.cacheable`` accepts; ``--as-written``:
the binding file is not put in its canonical form, ``[verify] canonical_binding = false``), else with ``ninja -v``
as torch's own build runs it; compiler output on stdout (the build log), as ninja prints it. No candidate code
runs here, only compilers. Report: ``VARIANT_DIR/compile.json``.

``check`` imports the built module under MODULE_NAME (the spec's own name: the shared object exports that init
function too, as the execution process loads it), which runs its static initialisers and pybind11 init: the
candidate's code. A library with no init function (no pybind11 module: ``load_inline(..., is_python_module=False)``,
operators registered with ``TORCH_LIBRARY``) is loaded as torch loads it, a plain ``dlopen``. It needs torch's
shared libraries, not torch: the verifier passes their directories in ``LD_LIBRARY_PATH``. A failed import prints
its traceback. ``--import-torch`` imports torch first (the verifier's second try of a module that did not import
without it). ``--gate``: once this process is ready to load the module (Python started, torch imported where asked,
torch's own shared libraries loaded: the verifier's code, seconds of it), it says so (a file ``ready`` beside REPORT)
and waits for the verifier's ``go`` (a file ``go`` there): the verifier takes the host's device locks in between, so
that they are held while the candidate's code runs and not while this process starts (GATE_WAIT_S at most; then it
stops without loading anything). Report: REPORT (the step's only writable path). Once it is written the process
ends at once (``os._exit``): no interpreter teardown, no static destructor of the candidate's, while the locks wait.

A report holds ``ok`` and this process's CPU seconds with its waited-for children (the compilers): the
sandbox's process tree does not hand its children's usage up to the verifier."""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

from verifier.build import objcache

COMPILE_REPORT = "compile.json"
GATE_WAIT_S = 120.0  # --gate: the longest the check waits for the verifier's go (its device locks' wait is bounded)
GATE_EXIT = 3  # --gate: no go came; nothing was loaded
# torch's shared libraries an extension links: loaded before the gate (the verifier's code; each a few hundred ms),
# so that the module's own load under the device locks finds them there. Those absent are skipped.
TORCH_LIBS = ("libc10.so", "libtorch_cpu.so", "libtorch.so", "libc10_cuda.so", "libtorch_cuda.so",
              "libtorch_python.so")


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its waited-for descendants (ninja, the compilers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return round(me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime, 3)


def compile_variant(variant_dir: str, obj_dir: str = "", canonical: bool = True) -> int:
    d = Path(variant_dir)
    error = f"Error building extension '{objcache.MODULE}'"
    stats: dict = {}
    try:
        stats = objcache.run_cached(d, obj_dir, error, canonical_binding=canonical) if obj_dir else objcache.run_ninja(d, error)
        ok = True
    except (RuntimeError, OSError) as e:
        print(error if isinstance(e, RuntimeError) else f"{error}: {e}", flush=True)
        ok = False
    (d / COMPILE_REPORT).write_text(json.dumps({"ok": ok, "objects_reused": len(stats.get("hits", [])),
                                                "binding": stats.get("binding", ""),
                                                "cpu_s": cpu_seconds()}))
    return 0 if ok else 1


def _preload_torch_libs() -> None:
    """torch's shared libraries from the directories of ``LD_LIBRARY_PATH`` (the verifier puts torch's there), each
    loaded as the module's own load would load it (its soname then resolves to this copy); absent ones skipped."""
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    for lib in TORCH_LIBS:
        path = next((os.path.join(d, lib) for d in dirs if os.path.isfile(os.path.join(d, lib))), None)
        if path:
            try:
                ctypes.CDLL(path)
            except OSError:
                pass


def _wait_for_go(report: str) -> bool:
    """Say ready (a file beside the report) and wait for the verifier's go; False after GATE_WAIT_S."""
    ready, go = Path(report).with_name("ready"), Path(report).with_name("go")
    ready.write_text("")
    deadline = time.monotonic() + GATE_WAIT_S
    while not go.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def check_import(so_path: str, name: str, report: str, import_torch: bool = False, gate: bool = False) -> int:
    import importlib.machinery
    import importlib.util

    ok = False
    try:
        if import_torch:
            import torch  # noqa: F401
        if gate:
            _preload_torch_libs()
            if not _wait_for_go(report):
                print(f"[verifier] no go from the verifier within {GATE_WAIT_S:.0f} s; nothing loaded", flush=True)
                return GATE_EXIT
        if objcache.defines([Path(so_path)], f"PyInit_{name}", dynamic=True) is False:
            # a library of operators (no pybind11 module: ``is_python_module=False``), loaded as torch loads it
            # (``torch.ops.load_library``: a plain dlopen, which runs its static initialisers, the registrations)
            import ctypes

            ctypes.CDLL(so_path)
            print(f"[verifier] {Path(so_path).name} has no Python module (no PyInit_{name}): loaded as a library of "
                  "operators", flush=True)
        else:
            loader = importlib.machinery.ExtensionFileLoader(name, so_path)
            loader.exec_module(importlib.util.module_from_spec(importlib.util.spec_from_file_location(
                name, so_path, loader=loader)))
        ok = True
    except BaseException:  # noqa: BLE001 - whatever the candidate's init raised is its failure
        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    Path(report).write_text(json.dumps({"ok": ok, "cpu_s": cpu_seconds()}))
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "compile":
        rest, obj_dir = argv[2:], ""
        if rest[:1] == ["--objects"] and len(rest) >= 2:
            obj_dir, rest = rest[1], rest[2:]
        if rest in ([], ["--as-written"]):
            return compile_variant(argv[1], obj_dir, canonical=not rest)
    if len(argv) >= 4 and argv[0] == "check" and set(argv[4:]) <= {"--import-torch", "--gate"} \
            and len(set(argv[4:])) == len(argv[4:]):
        return check_import(argv[1], argv[2], argv[3], import_torch="--import-torch" in argv[4:],
                            gate="--gate" in argv[4:])
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    code = main(sys.argv[1:])
    if sys.argv[1:2] == ["check"]:
        # the import check's report is written: the process ends without the interpreter's teardown, which ran the
        # candidate's static destructors and unloaded torch's libraries while the verifier still held the host's
        # device locks for it (0.1 s with torch's libraries loaded, 0.5 s with torch imported, on the 2-core
        # machine; the checks' holds were 0.6 s median on one H200 and the drain timers waited most for)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
