"""What a job loads, inside an execution child (verifier/child/worker.py): a program text as a module
(:func:`exec_module`, the task's reference or the candidate), and the candidate's extensions as the compile pool
built them (:func:`make_prebuilt_load_inline`, which replaces ``torch.utils.cpp_extension.load_inline`` for the
candidate: the keyed build's module, its functions counted in ``KERNEL_CALLS``, knocked out in a knockout run).
Imports: torch, the standard library and verifier/child + verifier/common.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.machinery
import importlib.util
import json
import linecache
import sys
import threading
import types
from pathlib import Path

import torch

from verifier.common.backends import own_kernel_names
from verifier.common.spec import canonical_spec, extension_name, spec_key


@contextlib.contextmanager
def giving_way(lock, backend, budget_s: float):
    """The candidate's construction with points of giving way. Its modules' weights are drawn on the host (seconds
    for a large network) while the process holds the device shared, so a timer that came meanwhile waited for all
    of it (the real batch's longest drain at 4e97331, 13.5 s over 11 constructions on one H200). Each parameter a
    module registers (torch's global registration hook, on the constructing thread) is now such a point: where a
    timer waits, this process's queued device work is finished and the timer has the device first
    (``DeviceLock.yield_to_timer``: bounded by the job's one budget of giving way)."""
    thread = threading.get_ident()

    def hook(module, name, param):
        if threading.get_ident() != thread or not lock.timer_waiting():
            return
        if backend.name == "cuda" and torch.cuda.is_current_stream_capturing():
            return  # a CUDA graph being captured (a constructor may capture one): no synchronising inside it
        backend.synchronize()
        lock.yield_to_timer(budget_s)

    handle = torch.nn.modules.module.register_module_parameter_registration_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def exec_module(name: str, code: str, filename: str):
    """Run a program as module ``name``. Its text is registered with linecache under ``filename``, so that code
    reading its own source (``inspect.getsource``: a module-level ``@triton.jit``) finds it."""
    mod = types.ModuleType(name)
    mod.__file__ = filename
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    sys.modules[name] = mod
    exec(compile(code, filename, "exec", dont_inherit=True), mod.__dict__)
    return mod


KERNEL_CALLS = [0]


class CountedExtension(types.ModuleType):
    """The prebuilt extension as the candidate sees it: every function it exports counts its calls, and so does
    every method of the classes it defines (pybind11's ``py::class_``: ``ext.Relu(0.1).run(x)``, an instance's
    ``__call__``, a static method). (A submodule, ``m.def_submodule``, needs ``PyImport_AddModule``, which the
    binary scan rejects as C11: the same call reaches any module already imported.) With ``knock`` (a cpu knockout run:
    verifier/child/knockout.py ``ChildKnockout.knock_call``) each of those calls is knocked out instead of returning
    its result. A class is handed back as itself, its methods replaced in place (``count_class``), so its instances
    are the extension's own and pass its type checks."""

    def __init__(self, mod, knock=None):
        super().__init__(mod.__name__)
        self.__dict__["_km_mod"] = mod
        self.__dict__["_km_knock"] = knock

    def __getattr__(self, name):
        mod = self.__dict__["_km_mod"]
        attr = getattr(mod, name)
        knock = self.__dict__["_km_knock"]
        if isinstance(attr, type) and _defined_in(attr, mod):
            count_class(attr, knock)
            return attr
        if callable(attr) and not name.startswith("__"):
            def counted(*a, **k):
                KERNEL_CALLS[0] += 1
                return attr(*a, **k) if knock is None else knock(name, attr, a, k)
            return counted
        return attr


def _defined_in(cls: type, mod) -> bool:
    """Whether ``cls`` is a class the extension module ``mod`` defines."""
    owner = getattr(cls, "__module__", "") or ""
    return owner == mod.__name__ or owner.startswith(mod.__name__ + ".")


_COUNTED_CLASSES: set = set()
_METHOD_TYPES = (types.BuiltinFunctionType, types.FunctionType, types.MethodDescriptorType,
                 types.WrapperDescriptorType)


def count_class(cls: type, knock=None) -> None:
    """Replace, in place and once, each method ``cls`` defines (an instance method, a static method, ``__call__``)
    with one that counts its calls in ``KERNEL_CALLS`` (knocked out with ``knock``), and its ``__init__``, counted
    only (a constructor called in forward counts as a call of the extension; it is never knocked out, its instance
    must exist). Properties, nested classes and other dunders are left as they are. pybind11 keeps an instance method in the class as an ``instancemethod``
    around the C function; any method that cannot be replaced stays as it was (its calls are then not counted)."""
    if cls in _COUNTED_CLASSES:
        return
    _COUNTED_CLASSES.add(cls)
    label = cls.__name__
    for name, member in list(vars(cls).items()):
        if name.startswith("__") and name not in ("__call__", "__init__"):
            continue
        if isinstance(member, staticmethod):
            fn = member.__func__
            replacement = staticmethod(_counting(f"{label}.{name}", fn, knock))
        elif isinstance(member, classmethod):
            continue
        elif type(member).__name__ == "instancemethod" or isinstance(member, _METHOD_TYPES):
            replacement = _counting_method(f"{label}.{name}", member, None if name == "__init__" else knock)
        else:
            continue
        try:
            setattr(cls, name, replacement)
        except (AttributeError, TypeError):
            continue


def _counting(label: str, fn, knock):
    def counted(*a, **k):
        KERNEL_CALLS[0] += 1
        return fn(*a, **k) if knock is None else knock(label, fn, a, k)
    return counted


def _counting_method(label: str, member, knock):
    def counted(self, *a, **k):
        KERNEL_CALLS[0] += 1
        bound = member.__get__(self, type(self))
        return bound(*a, **k) if knock is None else knock(label, bound, a, k)
    return counted


def _exports(path: str, symbol: str) -> bool:
    """Whether the shared object ``path`` exports ``symbol`` (loading it: its static initialisers run, as any load
    of it runs them)."""
    try:
        return hasattr(ctypes.CDLL(path), symbol)
    except OSError:
        return True  # it does not load: the import as a Python module says why


def load_so(name: str, path: str):
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def make_prebuilt_load_inline(build_root: str, allow_compile: bool, cuda_kernel_names: list[str], on_load=None, knock=None, registry: list | None = None, channel: list | None = None):
    """A load_inline that returns the module the compile pool built for the same spec. Nothing is compiled in this
    process: a spec the static stage could not resolve (a source made at run time) is sent to the verifier over the
    job's channel (``channel``: a list that holds the child's ``Channel`` once it exists, before the candidate is
    imported), which builds it in its own build root and scans the binary before answering (verifier/build/runtime.py);
    the module is then loaded from there, as a compile pool build is. So the binary the verdict judges is the one this
    process loads: nothing here can remove or replace it first (the build root is read-only in the sandbox, and the
    verifier sealed it as built). ``allow_compile`` off: such a spec raises.
    ``on_load(so_path)`` is called with each extension's file once it is loaded
    (a knockout run on cuda: verifier/judge/knockout.py); ``knock`` knocks out each call of the extensions' functions
    (a knockout run on cpu), and of its own operators. ``registry``: a list that holds the dispatcher's
    registrations (verifier/child/oplib.py ``Registry``) once the candidate is about to be imported; each load is
    watched by it, which tells the candidate's own operators (``TORCH_LIBRARY``) from anything else it registers.

    ``is_python_module=False`` is loaded as torch loads it, ``torch.ops.load_library`` (a library of operators: no
    Python module), and the path is returned, as torch returns it."""
    kept: list = []  # the knockout's kernels of the own operators (cpu): alive while the candidate runs

    def load(so_path: str, name: str, python_module: bool, empty_module: bool = False):
        """Load one extension under the registry's watch; the knockout's hooks after it. ``empty_module``:
        ``functions=[]``, for which torch's build writes a pybind11 module with nothing in it and the compile pool's
        none (an empty list and no list share one build): a library with no init function is then loaded as one and
        handed back as the empty module torch's is."""
        reg = registry[0] if registry else None
        before = set(reg.own) if reg is not None else set()
        with reg.loading(so_path) if reg is not None else contextlib.nullcontext():
            if python_module and not (empty_module and not _exports(so_path, f"PyInit_{name}")):
                mod = load_so(name, so_path)
            elif python_module:
                torch.ops.load_library(so_path)
                mod = types.ModuleType(name)
            else:
                torch.ops.load_library(so_path)
        if on_load:
            on_load(so_path)
        if knock is not None and reg is not None:
            knock_own_operators(sorted(set(reg.own) - before), knock, reg, kept)
        return CountedExtension(mod, knock) if python_module else so_path

    def load_inline(name, cpp_sources=None, cuda_sources=None, functions=None, **kw):
        python_module = kw.pop("is_python_module", True)
        args = dict(kw, cpp_sources=cpp_sources, cuda_sources=cuda_sources, functions=functions)
        key = spec_key(args)
        cuda_kernel_names.extend(own_kernel_names(canonical_spec(args)))
        empty = functions is not None and not isinstance(functions, str) and not functions
        res = Path(build_root) / key / "result.json"
        if res.is_file():
            d = json.loads(res.read_text())
            if not d["ok"]:
                raise RuntimeError("extension failed to compile (see the compile stage)")
            return load(d["so_path"], extension_name(key), python_module, empty)
        if not allow_compile:
            raise RuntimeError("extension was not built by the compile pool and builds at run time are off")
        if not channel:
            raise RuntimeError("an extension built at run time before the verifier's channel exists")
        got = channel[0].build(canonical_spec(args))
        if not got.get("ok"):
            raise RuntimeError(f"Error building extension '{name}' (built by the verifier at run time):\n"
                               f"{got.get('error', '')}")
        return load(str(got["so_path"]), extension_name(str(got["key"])), python_module, empty)

    return load_inline


def knock_own_operators(ops: list[str], knock, registry, kept: list) -> None:
    """A cpu knockout run: each call of the candidate's own operators ``ops`` knocked out as its extension's
    functions are (``knock``: on copies of its arguments, its result wrong in every value). The verifier registers a
    kernel of its own for them at the Autograd key, which calls the candidate's kernel below it; the registry takes
    it as the operator's registrations now (``adopt``). A failure leaves the operator as it was (the knockout then
    sees its calls run: inconclusive or wrong, never a rejection by itself)."""
    for op in ops:
        ns, _, rest = op.partition("::")
        packet, _, overload = rest.partition(".")
        try:
            handle = getattr(getattr(getattr(torch.ops, ns), packet), overload or "default")
            lib = torch.library.Library(ns, "IMPL")

            def knocked(*args, _handle=handle, _name=op, **kwargs):
                with torch._C._AutoDispatchBelowAutograd():
                    return knock(_name, _handle, args, kwargs)

            lib.impl(rest, knocked, "Autograd")
            kept.append(lib)
            registry.adopt(op)
        except Exception:  # noqa: BLE001 - the knockout's own failure: its calls run as written
            continue
