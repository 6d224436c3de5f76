"""Memory one process owns and another maps: the buffers of the trusted harness's clocked calls.

cpu: a file in the job directory (on /dev/shm when job directories live there) mapped by both sides with
``torch.from_file(shared=True)``. cuda: device memory the harness allocates with the driver API (``cuMemAlloc``,
outside torch's caching allocator, so an IPC handle names exactly this allocation) and exports with
``cuIpcGetMemHandle``; the execution child opens it (``cuIpcOpenMemHandle``) and sees it as a uint8 tensor through
``__cuda_array_interface__``. Neither side goes through torch.multiprocessing (its CUDA sharing needs a
shared-memory manager and ref-count files the sandbox does not share).

Guarantees: the harness's pool lives until the harness frees it (after the child ended); offsets are 256-byte
aligned so any dtype can be viewed at them. Not guaranteed: anything about what the other process writes there
(the harness reads only what it must, and checks it).
Imports: torch and the standard library only.
"""

from __future__ import annotations

import ctypes
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


def view(pool: torch.Tensor, offset: int, shape, dtype: str) -> torch.Tensor:
    """A tensor of ``shape`` and ``dtype`` over the pool's bytes at ``offset`` (contiguous)."""
    dt = dtype_of(dtype)
    n = 1
    for s in shape:
        n *= int(s)
    nb = n * torch.empty((), dtype=dt).element_size()
    return pool[offset:offset + nb].view(dt).view(tuple(int(s) for s in shape))


# ---------------------------------------------------------------------------- cpu: a shared file


def cpu_pool(path: Path, nbytes: int) -> torch.Tensor:
    """Create (harness) a shared file of ``nbytes`` and map it."""
    with open(path, "wb") as f:
        f.truncate(max(nbytes, 1))
    return torch.from_file(str(path), shared=True, size=max(nbytes, 1), dtype=torch.uint8)


def cpu_map(path: str, nbytes: int) -> torch.Tensor:
    """Map (child) the harness's shared file."""
    return torch.from_file(path, shared=True, size=max(nbytes, 1), dtype=torch.uint8)


# ---------------------------------------------------------------------------- cuda: driver-API IPC

_CU = None


def _cu():
    global _CU
    if _CU is None:
        _CU = ctypes.CDLL("libcuda.so.1")
    return _CU


def _ok(rc: int, what: str) -> None:
    if rc != 0:
        name = ctypes.c_char_p()
        try:
            _cu().cuGetErrorName(rc, ctypes.byref(name))
        except Exception:  # noqa: BLE001
            pass
        raise RuntimeError(f"{what} failed: CUDA driver error {rc} ({(name.value or b'').decode()})")


def _current_context() -> None:
    """Make the device's primary context (torch's) current on this thread, as the runtime would."""
    torch.cuda.init()
    cu = _cu()
    ctx = ctypes.c_void_p()
    _ok(cu.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    if ctx.value:
        return
    dev = ctypes.c_int()
    _ok(cu.cuDeviceGet(ctypes.byref(dev), torch.cuda.current_device()), "cuDeviceGet")
    _ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    _ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


class _DevicePointer:
    """Presents raw device memory to ``torch.as_tensor`` (zero copy) through the CUDA array interface."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}


class CudaPool:
    """Device memory owned by the harness, exported by an IPC handle (hex) the child opens."""

    def __init__(self, nbytes: int):
        _current_context()
        self.nbytes = max(nbytes, ALIGN)
        ptr = ctypes.c_uint64()
        _ok(_cu().cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(self.nbytes)), "cuMemAlloc")
        self.ptr = ptr.value
        handle = (ctypes.c_char * 64)()
        _ok(_cu().cuIpcGetMemHandle(handle, ctypes.c_uint64(self.ptr)), "cuIpcGetMemHandle")
        self.handle = bytes(handle).hex()
        self.tensor = torch.as_tensor(_DevicePointer(self.ptr, self.nbytes), device="cuda")

    def free(self) -> None:
        if self.ptr:
            torch.cuda.synchronize()
            self.tensor = None
            _cu().cuMemFree_v2(ctypes.c_uint64(self.ptr))
            self.ptr = 0


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


def cuda_map(handle_hex: str, nbytes: int) -> torch.Tensor:
    """Open (child) the harness's pool: a uint8 tensor over its memory, valid for this process's life."""
    _current_context()
    h = _Handle()
    ctypes.memmove(ctypes.byref(h), bytes.fromhex(handle_hex), 64)
    ptr = ctypes.c_uint64()
    cu = _cu()
    opener = getattr(cu, "cuIpcOpenMemHandle_v2", None) or cu.cuIpcOpenMemHandle
    _ok(opener(ctypes.byref(ptr), h, ctypes.c_uint(1)), "cuIpcOpenMemHandle")  # lazy peer access
    return torch.as_tensor(_DevicePointer(ptr.value, nbytes), device="cuda")
