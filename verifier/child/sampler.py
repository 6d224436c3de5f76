"""Where forward's CPU time goes, on the cpu backend: the sampler (cpu_sampler.c) in the execution child.

A sampling thread looks at every thread's CPU clock each PERIOD_US of wall time while a watched call runs (a trial's
forward, every timed call) and signals (SIGPROF) each one that ran since, whose handler records the address the signal
interrupted, weighted by the CPU time it stands for (in periods). A timer over the process's CPU time fires only at the
kernel's tick (4 ms), which left a short clocked bracket unseen; the thread's sleep is a high-resolution timer. ``Sampler.take`` turns the addresses into counts per
mapped file and offset in it (``/proc/self/maps``), which the judge reads against the libraries' symbol tables
(verifier/judge/cpu_time.py): PyTorch's compute reached below the dispatcher from the candidate's C++ (by a function
pointer found in a loaded library's image, so that no import, no dispatcher op and no named route shows it) spends
forward's time in PyTorch's kernels, where no monitor of ops looks. Imports: stdlib only.
"""

from __future__ import annotations

import bisect
import ctypes

PERIOD_US = 500  # a look at every thread per half millisecond of wall time while a call is watched: a sample per
# half millisecond of each thread's CPU time (a clocked bracket of 2 ms has about 4)
MAX_KEYS = 4096  # distinct (file, offset) pairs a record keeps; the rest are counted under their file


class Sampler:
    """The loaded sampler library, or a record of why it is not there (``error``)."""

    def __init__(self, path: str):
        self.lib, self.error, self.started = None, "", False
        if not path:
            return
        try:
            lib = ctypes.CDLL(path)
            lib.km_sampler_start.argtypes = [ctypes.c_long]
            lib.km_not_whole.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_long),
                                         ctypes.POINTER(ctypes.c_long), ctypes.c_int]
            lib.km_sampler_take.restype = ctypes.c_long
            lib.km_sampler_take.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32),
                                            ctypes.c_long, ctypes.POINTER(ctypes.c_long), ctypes.POINTER(ctypes.c_long),
                                            ctypes.POINTER(ctypes.c_long)]
            self.lib = lib
        except (OSError, AttributeError) as e:
            self.error = f"the cpu sampler did not load: {e}"

    def start(self) -> None:
        if self.lib is not None and not self.started:
            self.started = self.lib.km_sampler_start(PERIOD_US) == 0
            if not self.started:
                self.error = "the cpu sampler's timer did not start"

    def stop(self) -> None:
        if self.lib is not None and self.started:
            self.lib.km_sampler_stop()
            self.started = False

    def on(self) -> None:
        if self.started:
            self.lib.km_sampler_on()

    def off(self) -> None:
        if self.started:
            self.lib.km_sampler_off()

    def not_whole(self, ptr: int, itemsize: int, shape: tuple, strides: tuple, to_bool: bool) -> bool | None:
        """Whether a host tensor of float32 / float64 / float16 (``itemsize`` 4, 8, 2) at ``ptr`` holds a value that
        is not whole (``to_bool``: not 0 or 1), NaN included: the dispatch monitor's conversion check, in this
        library's C (cpu_sampler.c ``km_not_whole``), whose samples are nobody's compute; None where it cannot say."""
        if self.lib is None or len(shape) > 64:
            return None
        n = len(shape)
        got = self.lib.km_not_whole(ctypes.c_void_p(ptr), itemsize, n, (ctypes.c_long * max(n, 1))(*shape),
                                    (ctypes.c_long * max(n, 1))(*strides), int(to_bool))
        return None if got < 0 else bool(got)

    def intact(self) -> bool:
        return not self.started or bool(self.lib.km_sampler_intact())

    def take(self) -> dict:
        """The samples since the last take: ``{"total": w, "at": {"<file>|<offset hex>": w}, "sent": s,
        "children_us": c}``, weights in periods of CPU time (``total``: what the handler recorded; ``sent``: what the
        sampling thread signalled, more than recorded where a thread blocks the signal); ``children_us``: the CPU time
        of processes this one started and waited for since the last take (fork, vfork, a clone of its own)."""
        if not self.started:
            return {}
        buf, ws = (ctypes.c_uint64 * 65536)(), (ctypes.c_uint32 * 65536)()
        sent, weight, children = ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0)
        n = int(self.lib.km_sampler_take(buf, ws, 65536, ctypes.byref(sent), ctypes.byref(weight),
                                         ctypes.byref(children)))
        k = min(n, 65536)
        return {"total": int(weight.value), "sent": int(sent.value), "children_us": int(children.value),
                "at": locate(list(buf[:k]), list(ws[:k]))}


def _maps() -> tuple[list[int], list[tuple[int, int, str]]]:
    rows = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) < 6 or "x" not in parts[1]:
                    continue
                lo, hi = (int(v, 16) for v in parts[0].split("-"))
                rows.append((lo, hi, int(parts[2], 16), parts[5].strip()))
    except OSError:
        return [], []
    rows.sort()
    return [r[0] for r in rows], [(r[1], r[2] - r[0], r[3]) for r in rows]


def merge(records: list[dict]) -> dict:
    """Several takes' samples as one record (the timed calls' brackets together)."""
    out: dict = {"total": 0, "sent": 0, "children_us": 0, "at": {}}
    for r in records:
        if not r:
            continue
        for k in ("total", "sent", "children_us"):
            out[k] += int(r.get(k, 0) or 0)
        for k, v in (r.get("at") or {}).items():
            out["at"][k] = out["at"].get(k, 0) + int(v)
    return out if any(records) else {}


def locate(pcs: list[int], weights: list[int] | None = None) -> dict:
    """Weights (counts where none are given) per ``<file>|<offset in the file, hex>`` (``<anon>|0`` outside any mapped
    file)."""
    starts, rows = _maps()
    out: dict[str, int] = {}
    for j, pc in enumerate(pcs):
        w = int(weights[j]) if weights is not None else 1
        i = bisect.bisect_right(starts, pc) - 1
        if i >= 0 and pc < rows[i][0]:
            key = f"{rows[i][2]}|{pc + rows[i][1]:x}"
        else:
            key = "<anon>|0"
        out[key] = out.get(key, 0) + w
    if len(out) > MAX_KEYS:
        keep = dict(sorted(out.items(), key=lambda kv: -kv[1])[:MAX_KEYS])
        for k, v in out.items():
            if k not in keep:
                rest = k.split("|", 1)[0] + "|*"
                keep[rest] = keep.get(rest, 0) + v
        out = keep
    return out
