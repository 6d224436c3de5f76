"""Memory one process owns and another maps: the buffers of the trusted harness's clocked calls.

cpu: a file in the job directory (on /dev/shm when job directories live there) mapped by both sides with
``torch.from_file(shared=True)``. cuda: device memory the harness allocates with the driver API (``cuMemCreate``,
outside torch's caching allocator) and exports as a file descriptor; the execution child imports it and sees it as
a uint8 tensor through ``__cuda_array_interface__``. Neither side goes through torch.multiprocessing (its CUDA sharing needs a
shared-memory manager and ref-count files the sandbox does not share).

Guarantees: the harness's pool lives until the harness frees it (after the child ended); offsets are 256-byte
aligned so any dtype can be viewed at them. Not guaranteed: anything about what the other process writes there
(the harness reads only what it must, and checks it).
Imports: torch and the standard library only.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

ALIGN = 256


def aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def dtype_of(name: str) -> torch.dtype:
    d = getattr(torch, name.replace("torch.", ""), None)
    if not isinstance(d, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return d


def view(pool: torch.Tensor, offset: int, shape, dtype: str, strides=None) -> torch.Tensor:
    """A tensor of ``shape`` and ``dtype`` over the pool's bytes at ``offset``: contiguous, or with ``strides``
    (``kept_strides``: a channels_last or transposed input laid out as the task made it)."""
    dt = dtype_of(dtype)
    shape = tuple(int(s) for s in shape)
    n = span(shape, strides) if strides is not None else math.prod(shape)
    nb = n * torch.empty((), dtype=dt).element_size()
    flat = pool[offset:offset + nb].view(dt)
    if strides is not None:
        return flat.as_strided(shape, tuple(int(s) for s in strides))
    return flat.view(shape)


def span(shape, strides) -> int:
    """The elements a tensor of ``shape`` and ``strides`` (none negative) reaches from its first."""
    if any(int(s) == 0 for s in shape):
        return 0
    return 1 + sum((int(s) - 1) * int(st) for s, st in zip(shape, strides))


def kept_strides(t: torch.Tensor) -> list | None:
    """The strides an input keeps in the pool (None: laid out contiguous). A task's input is handed to every call as
    the task made it: a channels_last activation, a transposed view (an honest NHWC kernel that checks its layout
    raised on every timed call, laid out contiguous, and one that reads it without a check computed another answer
    there: docs/ANTI_CHEAT.md class 79). Only layouts whose elements are all distinct (no stride of 0, no overlap:
    an expanded input stays contiguous, since a copy into it would write one element many times) and at most twice
    the tensor's own bytes (a slice with gaps)."""
    if t.is_contiguous() or not t.numel():
        return None
    dims = sorted((int(st), int(s)) for s, st in zip(t.shape, t.stride()) if s > 1)
    reach = 1
    for st, s in dims:
        if st < reach:
            return None  # overlapping (an expand, stride 0) or interleaved
        reach = st * s
    if span(t.shape, t.stride()) > 2 * t.numel():
        return None
    return [int(st) for st in t.stride()]


# ---------------------------------------------------------------------------- inputs that are not one tensor
#
# A clocked call's input that is neither a tensor nor a value JSON carries as it is (a tuple of dims, a list of
# tensors, a dtype, a NaN, a torch.Size) travels as a tree: JSON with tagged nodes, its tensors placed in the pool like
# the top-level ones (``{"~": "t", "at": [offset, shape, dtype]}``). So the harness writes every input of every call
# and checks every timed output; no input is ever the child's own draw. A leaf of another kind raises Uncarried.

TAG = "~"


class Uncarried(ValueError):
    """An input value the channel cannot carry (an object of the task's own class, a numpy array)."""


def encode_value(x, place) -> object:
    """``x`` as the channel carries it; ``place(tensor) -> [offset, shape, dtype]`` puts each tensor in the pool, in
    the order of a depth-first walk (the same order for every call of a job: ``value_tensors``)."""
    if isinstance(x, torch.Tensor):
        return {TAG: "t", "at": place(x)}
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return x if math.isfinite(x) else {TAG: "float", "repr": repr(float(x))}
    if isinstance(x, torch.dtype):
        return {TAG: "dtype", "name": str(x)}
    if isinstance(x, torch.device):
        return {TAG: "device", "name": str(x)}
    if isinstance(x, torch.Size):
        return {TAG: "size", "items": [int(i) for i in x]}
    if isinstance(x, tuple):
        return {TAG: "tuple", "items": [encode_value(i, place) for i in x]}
    if isinstance(x, list):
        return [encode_value(i, place) for i in x]
    if isinstance(x, dict):
        return {TAG: "dict", "items": [[encode_value(k, place), encode_value(v, place)] for k, v in x.items()]}
    raise Uncarried(f"an input of type {type(x).__name__}")


def value_tensors(x) -> list:
    """The tensors of an input value, in ``encode_value``'s order."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict):
        return [t for k, v in x.items() for t in value_tensors(k) + value_tensors(v)]
    if isinstance(x, (list, tuple)):
        return [t for i in x for t in value_tensors(i)]
    return []


def decode_value(node, tensor) -> object:
    """An encoded value back as Python objects; ``tensor([offset, shape, dtype])`` gives each tensor's view."""
    if isinstance(node, list):
        return [decode_value(i, tensor) for i in node]
    if not isinstance(node, dict):
        return node
    kind = node.get(TAG)
    if kind == "t":
        return tensor(node["at"])
    if kind == "float":
        return float(node["repr"])
    if kind == "dtype":
        return dtype_of(str(node["name"]))
    if kind == "device":
        return torch.device(str(node["name"]))
    if kind == "size":
        return torch.Size(int(i) for i in node["items"])
    if kind == "tuple":
        return tuple(decode_value(i, tensor) for i in node["items"])
    if kind == "dict":
        return {decode_value(k, tensor): decode_value(v, tensor) for k, v in node["items"]}
    raise ValueError(f"an encoded value of unknown kind {kind!r}")


# ---------------------------------------------------------------------------- cpu: a shared file


def cpu_pool(path: Path, nbytes: int) -> torch.Tensor:
    """Create (harness) a shared file of ``nbytes`` and map it."""
    with open(path, "wb") as f:
        f.truncate(max(nbytes, 1))
    return torch.from_file(str(path), shared=True, size=max(nbytes, 1), dtype=torch.uint8)


def cpu_map(path: str, nbytes: int) -> torch.Tensor:
    """Map (child) the harness's shared file."""
    return torch.from_file(path, shared=True, size=max(nbytes, 1), dtype=torch.uint8)


# ---------------------------------------------------------------------------- cuda: driver-API shared memory
#
# The pool is created with the virtual memory management API (cuMemCreate) and exported as a POSIX file descriptor,
# which travels over the job's Unix socket (SCM_RIGHTS); the child imports and maps it. Legacy IPC handles
# (cudaIpcGetMemHandle, interprocess events) do not open across the sandbox's pid namespace ("mapping of buffer
# object failed" on the H200); a file descriptor does. The two processes order their streams with stream memory
# operations on flag words inside the pool (cuStreamWriteValue32 / cuStreamWaitValue32): no interprocess event.

import ctypes as C  # noqa: E402

_CU = None
_U64, _SZ, _I, _U, _P = C.c_uint64, C.c_size_t, C.c_int, C.c_uint, C.c_void_p


class _Location(C.Structure):
    _fields_ = [("type", _I), ("id", _I)]


class _AllocFlags(C.Structure):
    _fields_ = [("compressionType", C.c_ubyte), ("gpuDirectRDMACapable", C.c_ubyte), ("usage", C.c_ushort),
                ("reserved", C.c_ubyte * 4)]


class _Prop(C.Structure):
    _fields_ = [("type", _I), ("requestedHandleTypes", _I), ("location", _Location), ("win32HandleMetaData", _P),
                ("allocFlags", _AllocFlags)]


class _Access(C.Structure):
    _fields_ = [("location", _Location), ("flags", _I)]


_PINNED, _POSIX_FD, _ON_DEVICE, _READ_WRITE = 1, 1, 1, 3


def _cu():
    global _CU
    if _CU is None:
        cu = C.CDLL("libcuda.so.1")
        sigs = {
            "cuCtxGetCurrent": [C.POINTER(_P)], "cuCtxSetCurrent": [_P], "cuDeviceGet": [C.POINTER(_I), _I],
            "cuDevicePrimaryCtxRetain": [C.POINTER(_P), _I],
            "cuMemGetAllocationGranularity": [C.POINTER(_SZ), C.POINTER(_Prop), _I],
            "cuMemCreate": [C.POINTER(_U64), _SZ, C.POINTER(_Prop), _U64],
            "cuMemAddressReserve": [C.POINTER(_U64), _SZ, _SZ, _U64, _U64],
            "cuMemMap": [_U64, _SZ, _SZ, _U64, _U64], "cuMemSetAccess": [_U64, _SZ, C.POINTER(_Access), _SZ],
            "cuMemExportToShareableHandle": [_P, _U64, _I, _U64],
            "cuMemImportFromShareableHandle": [C.POINTER(_U64), _P, _I],
            "cuMemUnmap": [_U64, _SZ], "cuMemRelease": [_U64], "cuMemAddressFree": [_U64, _SZ],
            "cuGetErrorName": [_I, C.POINTER(C.c_char_p)],
        }
        for name, args in sigs.items():
            f = getattr(cu, name)
            f.argtypes, f.restype = args, _I
        for name in ("cuStreamWaitValue32", "cuStreamWriteValue32"):
            f = getattr(cu, name + "_v2", None) or getattr(cu, name)
            f.argtypes, f.restype = [_P, _U64, C.c_uint32, _U], _I
            setattr(cu, "km_" + name, f)
        _CU = cu
    return _CU


def _ok(rc: int, what: str) -> None:
    if rc != 0:
        name = C.c_char_p()
        try:
            _cu().cuGetErrorName(rc, C.byref(name))
        except Exception:  # noqa: BLE001
            pass
        raise RuntimeError(f"{what} failed: CUDA driver error {rc} ({(name.value or b'').decode()})")


def _device() -> int:
    """Make the device's primary context (torch's) current on this thread, as the runtime would; its ordinal."""
    torch.cuda.init()
    dev_index = torch.cuda.current_device()
    cu = _cu()
    ctx = _P()
    _ok(cu.cuCtxGetCurrent(C.byref(ctx)), "cuCtxGetCurrent")
    dev = _I()
    _ok(cu.cuDeviceGet(C.byref(dev), dev_index), "cuDeviceGet")
    if not ctx.value:
        _ok(cu.cuDevicePrimaryCtxRetain(C.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        _ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return dev.value


def _prop(dev: int) -> _Prop:
    p = _Prop()
    p.type, p.requestedHandleTypes = _PINNED, _POSIX_FD
    p.location.type, p.location.id = _ON_DEVICE, dev
    return p


def _map(handle: int, size: int, dev: int) -> int:
    cu = _cu()
    ptr = _U64()
    _ok(cu.cuMemAddressReserve(C.byref(ptr), size, 0, 0, 0), "cuMemAddressReserve")
    _ok(cu.cuMemMap(ptr.value, size, 0, handle, 0), "cuMemMap")
    acc = _Access()
    acc.location.type, acc.location.id, acc.flags = _ON_DEVICE, dev, _READ_WRITE
    _ok(cu.cuMemSetAccess(ptr.value, size, C.byref(acc), 1), "cuMemSetAccess")
    return ptr.value


class _DevicePointer:
    """Presents raw device memory to ``torch.as_tensor`` (zero copy) through the CUDA array interface."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}


class CudaPool:
    """Device memory owned by the harness, exported as a file descriptor (``fd``) the child imports."""

    def __init__(self, nbytes: int):
        dev = _device()
        cu = _cu()
        prop = _prop(dev)
        gran = _SZ()
        _ok(cu.cuMemGetAllocationGranularity(C.byref(gran), C.byref(prop), 0), "cuMemGetAllocationGranularity")
        g = max(int(gran.value), 1)
        self.nbytes = (max(nbytes, ALIGN) + g - 1) // g * g
        h = _U64()
        _ok(cu.cuMemCreate(C.byref(h), self.nbytes, C.byref(prop), 0), "cuMemCreate")
        self.handle = h.value
        self.ptr = _map(self.handle, self.nbytes, dev)
        fd = _I(-1)
        _ok(cu.cuMemExportToShareableHandle(C.cast(C.byref(fd), _P), self.handle, _POSIX_FD, 0),
            "cuMemExportToShareableHandle")
        self.fd = fd.value
        self.tensor = torch.as_tensor(_DevicePointer(self.ptr, self.nbytes), device="cuda")
        self.tensor.zero_()

    def free(self) -> None:
        if self.ptr:
            torch.cuda.synchronize()
            self.tensor = None
            cu = _cu()
            cu.cuMemUnmap(self.ptr, self.nbytes)
            cu.cuMemAddressFree(self.ptr, self.nbytes)
            cu.cuMemRelease(self.handle)
            self.ptr = 0
        if self.fd >= 0:
            import os
            os.close(self.fd)
            self.fd = -1


def cuda_map(fd: int, nbytes: int) -> tuple[torch.Tensor, int]:
    """Import (child) the harness's pool from its file descriptor: (a uint8 tensor over it, its address)."""
    dev = _device()
    h = _U64()
    _ok(_cu().cuMemImportFromShareableHandle(C.byref(h), C.c_void_p(fd), _POSIX_FD), "cuMemImportFromShareableHandle")
    ptr = _map(h.value, nbytes, dev)
    return torch.as_tensor(_DevicePointer(ptr, nbytes), device="cuda"), ptr


def write_value(stream, addr: int, value: int) -> None:
    """Queue on ``stream`` (a torch stream) a 32-bit write of ``value`` at ``addr``, after the stream's earlier work
    (with a memory barrier: what that work wrote is visible to whoever sees the value)."""
    _ok(_cu().km_cuStreamWriteValue32(C.c_void_p(stream.cuda_stream), addr, value, 0), "cuStreamWriteValue32")


def wait_value(stream, addr: int, value: int) -> None:
    """Queue on ``stream`` a wait until the 32-bit word at ``addr`` is >= ``value`` (later work waits behind it)."""
    _ok(_cu().km_cuStreamWaitValue32(C.c_void_p(stream.cuda_stream), addr, value, 0), "cuStreamWaitValue32")
