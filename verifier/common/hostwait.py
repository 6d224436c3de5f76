"""How a process of the verifier's waits for its device: CUDA's default for a process with fewer contexts than the
host has cores, a spin that holds a whole core for as long as the device works (every ``synchronize``, ``.item()``,
copy to the host), or, under ``[verify] host_waits = "block"``, asleep until the driver wakes it
(``CU_CTX_SCHED_BLOCKING_SYNC``).

Why block: on one GPU host the verifier runs many processes with a CUDA context at once (each execution slot's trusted
process and its warm children, the reference's children), each waiting on the device for long stretches (a float64
reference forward of a level-3 model, the trials, the timing windows), while the candidates' builds need the same
cores. A spinning wait is the CPU of a build it delays.

What it does not change: what the verifier measures. Every timed figure is the device's own (CUDA events around the
gated calls, verifier/execute/harness.py); a forward that waits on the host inside a timed call (``.item()``, a
synchronize) would carry a sleeping thread's wake-up in its time, so a child spins while it holds the device alone
to be timed (``spinning``: CUDA's default again, the candidate's and the reference's children alike). A candidate can
set its own process back to spinning throughout: that costs it its own CPU only.

``block_on_waits()`` sets the flag on every visible device's primary context before the process makes one (torch
makes the primary context, and takes the flags set here); called where a process of the verifier's starts its CUDA
(verifier/child/forkserver.py's warm-up of a child, verifier/engine.py's slot processes) under ``[verify] host_waits
= "block"``, never in a fork server (the driver initialised there would make its forks unusable). The default is
"spin" (CUDA's): on one H100's real batch at k = 1 (24 model-written candidates, 16 cores) blocking cut the slots' and
the execution processes' CPU by about 1 CPU-s a program each and the builds' wall by a tenth, but the batch took 170
and 177 s against 152 s spinning: the trials and the device lock's hand-offs wait for each wake-up (the lock free,
nobody on the device, 28 s against 7 s). Imports: the standard library and verifier/common/childenv.py only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

from verifier.common import childenv

AUTO = 0x00  # CU_CTX_SCHED_AUTO: CUDA's default (a spin where the process has fewer contexts than the host has cores)
BLOCKING_SYNC = 0x04  # CU_CTX_SCHED_BLOCKING_SYNC
SCHED_MASK = 0x07  # CU_CTX_SCHED_MASK


def _driver():
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


def _primary_state(cu, ordinal: int):
    """(device handle, flags, whether active) of device ``ordinal``'s primary context; None where the driver says no."""
    dev = ctypes.c_int(0)
    flags, active = ctypes.c_uint(0), ctypes.c_int(0)
    if cu.cuDeviceGet(ctypes.byref(dev), ordinal) != 0 or \
            cu.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)) != 0:
        return None
    return dev, flags.value, bool(active.value)


def block_on_waits() -> bool:
    """Ask for blocking waits on every visible device's primary context; whether the driver took it on all of them.
    False (and nothing changed) without a driver or a device, or where a device's context is already active with
    other scheduling flags (the flags of an active context are left as they are)."""
    cu = _driver()
    if cu is None or cu.cuInit(0) != 0:
        return False
    count = ctypes.c_int(0)
    if cu.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return False
    ok = True
    for ordinal in range(count.value):
        state = _primary_state(cu, ordinal)
        if state is None:
            ok = False
            continue
        dev, flags, active = state
        if active:
            ok = ok and (flags & SCHED_MASK) == BLOCKING_SYNC
            continue
        set_flags = getattr(cu, "cuDevicePrimaryCtxSetFlags_v2", None) or cu.cuDevicePrimaryCtxSetFlags
        ok = set_flags(dev, ctypes.c_uint((flags & ~SCHED_MASK) | BLOCKING_SYNC)) == 0 and ok
    return ok


@contextlib.contextmanager
def spinning():
    """The current context's waits spin (CUDA's default) while the block runs, then block again: a child's timing
    phase, where it holds the device alone. Needs the driver's ``cuCtxSetFlags`` (CUDA 12.1); without it, or where
    the context does not wait blocking, nothing changes."""
    cu = _driver()
    set_flags = getattr(cu, "cuCtxSetFlags", None) if cu is not None else None
    old = ctypes.c_uint(0)
    changed = bool(set_flags) and cu.cuCtxGetFlags(ctypes.byref(old)) == 0 and \
        (old.value & SCHED_MASK) == BLOCKING_SYNC and set_flags(ctypes.c_uint((old.value & ~SCHED_MASK) | AUTO)) == 0
    try:
        yield changed
    finally:
        if changed:
            set_flags(old)


def held_alone(backend: str):
    """The context a child's timing phase runs in while it holds the device alone: its waits spin (``spinning``) on
    cuda where its warm process was told to wait blocking (``childenv.HOST_WAITS``); otherwise nothing (CUDA's own
    default spins already). The one spelling for the candidate's and the reference's children."""
    if backend == "cuda" and os.environ.get(childenv.HOST_WAITS, "spin") == "block":
        return spinning()
    return contextlib.nullcontext(False)


def waits_blocking(ordinal: int = 0) -> bool | None:
    """Whether this thread's current context (else device ``ordinal``'s primary context) waits blocking; None
    without a driver or device."""
    cu = _driver()
    if cu is None or cu.cuInit(0) != 0:
        return None
    current = ctypes.c_uint(0)
    if cu.cuCtxGetFlags(ctypes.byref(current)) == 0:
        return (current.value & SCHED_MASK) == BLOCKING_SYNC
    state = _primary_state(cu, ordinal)
    return None if state is None else (state[1] & SCHED_MASK) == BLOCKING_SYNC
