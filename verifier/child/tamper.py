"""Seeing what a candidate changed in torch, the verifier's modules and builtins (cheat C11).

``Snapshot.take()`` runs in the execution child before the candidate is imported; ``snapshot.changes()``
after each phase lists what differs: a function, method or class replaced in one of the watched
namespaces (torch, torch.nn.functional, torch.Tensor, nn.Module, torch.cuda and its Event, torch._C,
the profiler and dispatch-mode modules, time, builtins, the verifier's own modules), or a global flag
changed (cuDNN / TF32 / matmul precision / threads / deterministic algorithms / default dtype / SDPA
backends). The functions it calls to read flags and namespaces are bound at ``take()`` time, so patching
them afterwards does not blind it.

What it does not see: state with no getter (``torch.set_flush_denormal``), changes made in C++ by the
candidate's extension, and a candidate that finds this object in memory and edits it (the static stage
flags the usual ways to get there: gc, frames, sys.modules, private torch attributes). The reference is
timed in another process (verifier/engine.py), so an undetected change still cannot slow the reference.
"""

from __future__ import annotations

import builtins
import sys
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
import torch.profiler
import torch.utils._python_dispatch as pydispatch
import torch.utils.cpp_extension as cpp_extension


def _namespaces() -> dict:
    spaces = {"torch": torch, "torch.nn.functional": F, "torch.Tensor": torch.Tensor,
              "torch._C.TensorBase": torch._C.TensorBase, "torch.nn.Module": torch.nn.Module,
              "torch.cuda": torch.cuda, "torch.cuda.Event": torch.cuda.Event, "torch._C": torch._C,
              "torch.autograd": torch.autograd, "torch.autograd.profiler": torch.autograd.profiler,
              "torch.profiler": torch.profiler, "torch.utils._python_dispatch": pydispatch,
              "torch.utils.cpp_extension": cpp_extension, "torch.backends.cudnn": torch.backends.cudnn,
              "torch.backends.cuda": torch.backends.cuda, "time": time, "builtins": builtins}
    event_base = getattr(torch._C, "_CudaEventBase", None)
    if event_base is not None:
        spaces["torch._C._CudaEventBase"] = event_base
    for name, mod in list(sys.modules.items()):
        if name == "verifier" or not name.startswith("verifier.") or mod is None:
            continue
        spaces[name] = mod
        for attr, value in list(vars(mod).items()):  # the verifier's classes: their methods and class attributes
            if isinstance(value, type) and getattr(value, "__module__", "") == name:
                spaces[f"{name}.{attr}"] = value
    return spaces


def _is_class_space(ns) -> bool:
    """Namespaces where a callable ADDED after the snapshot is tampering too: the verifier's classes and
    objects (an instance attribute shadows the class's method), not modules (imports add names honestly)."""
    return not isinstance(ns, type(sys)) and getattr(ns, "__module__", "").startswith("verifier.")


def _cudart():
    """The CUDA runtime this process loaded (torch's), or None: found in the process's mappings, not by name
    lookup a candidate could steer."""
    try:
        for line in open("/proc/self/maps"):
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if "libcudart.so" in path:
                import ctypes
                return ctypes.CDLL(path)
    except OSError:
        pass
    return None


_PERSISTING_L2 = 0x06  # cudaLimitPersistingL2CacheSize


def _device_limit_getter(lib, limit: int):
    import ctypes

    get = lib.cudaDeviceGetLimit

    def read() -> int:
        value = ctypes.c_size_t(0)
        return int(value.value) if get(ctypes.byref(value), limit) == 0 else -1
    return read


def _flag_getters() -> dict:
    cuda_be = torch.backends.cuda
    getters = {
        "torch.backends.cudnn.enabled": torch._C._get_cudnn_enabled,
        "torch.backends.cudnn.benchmark": torch._C._get_cudnn_benchmark,
        "torch.backends.cudnn.deterministic": torch._C._get_cudnn_deterministic,
        "torch.backends.cudnn.allow_tf32": torch._C._get_cudnn_allow_tf32,
        "torch.backends.cuda.matmul.allow_tf32": torch._C._get_cublas_allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision,
        "torch.get_num_threads": torch.get_num_threads,
        "torch.get_num_interop_threads": torch.get_num_interop_threads,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled,
        "torch.get_default_dtype": torch.get_default_dtype,
        "torch.backends.mkldnn.enabled": torch._C._get_mkldnn_enabled,
    }
    for name in ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled", "cudnn_sdp_enabled"):
        if hasattr(cuda_be, name):
            getters[f"torch.backends.cuda.{name}"] = getattr(cuda_be, name)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        lib = _cudart()
        if lib is not None:  # device state that outlives a call: L2 lines kept for the candidate's next timed call
            getters["cudaLimitPersistingL2CacheSize"] = _device_limit_getter(lib, _PERSISTING_L2)
    for name in ("_get_cublas_allow_fp16_reduced_precision_reduction",
                 "_get_cublas_allow_bf16_reduced_precision_reduction"):
        if hasattr(torch._C, name):
            getters[f"torch._C.{name}"] = getattr(torch._C, name)
    return getters


def _unwrap(fn):
    # torch may wrap some functions itself after import (dynamo wraps torch.manual_seed with functools.wraps)
    for _ in range(8):
        inner = getattr(fn, "__wrapped__", None)
        if inner is None:
            return fn
        fn = inner
    return fn


def _identities(ns) -> dict:
    try:
        items = dict(vars(ns))
    except TypeError:
        return {}
    out = {}
    for k, v in items.items():
        if callable(v) or isinstance(v, (staticmethod, classmethod, property)):
            fn = _unwrap(v)
            inner = getattr(fn, "__func__", None) or getattr(fn, "fget", None) or fn
            # the function object and what it runs: replacing a method's __code__ keeps its identity
            out[k] = (id(fn), id(getattr(inner, "__code__", None)), id(getattr(inner, "__defaults__", None)))
    return out


@dataclass
class Snapshot:
    """Identities of the watched callables and values of the watched flags, as they were at ``take()``."""

    identities: dict = field(default_factory=dict)
    flags: dict = field(default_factory=dict)
    _spaces: dict = field(default_factory=dict, repr=False)
    _getters: dict = field(default_factory=dict, repr=False)
    _vars: object = None
    _keep: list = field(default_factory=list, repr=False)

    @classmethod
    def take(cls, watch: dict | None = None) -> "Snapshot":
        """``watch``: more objects to watch by name (the timing backend instance the child uses)."""
        snap = cls(_spaces={**_namespaces(), **(watch or {})}, _getters=_flag_getters(), _vars=vars)
        snap.identities = {name: _identities(ns) for name, ns in snap._spaces.items()}
        # the objects must stay alive, or a new object could reuse an id
        snap._keep = [dict(vars(ns)) for ns in snap._spaces.values() if hasattr(ns, "__dict__")]
        snap.flags = snap._read_flags()
        return snap

    def _read_flags(self) -> dict:
        out = {}
        for name, get in self._getters.items():
            try:
                out[name] = repr(get())
            except Exception as e:  # noqa: BLE001 - a flag unreadable on this build (no cuda) is left out
                out[name] = f"<unreadable: {type(e).__name__}>"
        return out

    def restore_threads(self) -> list[str]:
        """Put PyTorch's thread counts back where the snapshot found them (this slot's share of the cores), and say
        which were changed: ``torch.set_num_threads(os.cpu_count())`` at import or in ``__init__`` is an honest
        speed-up attempt (as an explicit OpenMP ``num_threads`` is), not tampering; the count is the verifier's, so
        the candidate runs with the slot's. A count that cannot be put back (PyTorch refuses a second interop count)
        stays a change."""
        setters = {"torch.get_num_threads": torch.set_num_threads,
                   "torch.get_num_interop_threads": torch.set_num_interop_threads}
        done = []
        for name, set_ in setters.items():
            get, before = self._getters.get(name), self.flags.get(name, "")
            try:
                now = repr(get()) if get is not None else before
                if now != before and before.isdigit():
                    set_(int(before))
                    if repr(get()) == before:
                        done.append(f"{name[len('torch.get_'):]}: {now} -> {before}")
            except Exception:  # noqa: BLE001 - left as it is: changes() reports it
                continue
        return done

    def changes(self) -> list[str]:
        """What differs from the snapshot: ``"replaced torch.matmul"``, ``"flag torch.backends.cudnn.enabled:
        True -> False"``. Names added since the snapshot are not listed (imports add attributes honestly)."""
        found = []
        for name, ns in self._spaces.items():
            before = self.identities[name]
            now = _identities(ns)
            for k, ident in before.items():
                if k not in now:
                    found.append(f"removed {name}.{k}")
                elif now[k] != ident:
                    found.append(f"replaced {name}.{k}")
            if _is_class_space(ns):
                found += [f"added {name}.{k}" for k in now if k not in before]
        flags = self._read_flags()
        for k, v in self.flags.items():
            if flags.get(k) != v:
                found.append(f"flag {k}: {v} -> {flags.get(k)}")
        return found
