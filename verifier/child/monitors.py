"""The two monitors of what ModelNew.forward computes, in the execution child (cheat C01, C11).

- ``DispatchRecorder``: a TorchDispatchMode recording every aten op dispatched (Python calls and at:: calls
  from C++ alike); a candidate can switch it off from inside forward (``torch._C._DisableTorchDispatch``).
- ``profiled`` / ``read_profile``: the profiler, a C++ observer of the dispatcher that the dispatch-mode
  switch does not reach; a ``km_forward`` marker proves it watched the whole call; on cuda it also gives
  each kernel's device time (own kernels vs foreign ones, for the time-coverage check in judge.py).
Both are judged by the allowlist of ``verifier.common.ops``. ``threads_beside`` / ``side_work_threads``: the
candidate's threads judged by whether they run after a call returned (C09), not counted. Imports: torch, the
standard library and verifier.common.
"""

from __future__ import annotations

import bisect
import os
import random
import threading
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

try:
    import numpy as np
except ImportError:  # then every conversion is judged after the call, as a device's
    np = None

from verifier.common.backends import is_own_kernel
from verifier.common.contract import TrialReport
from verifier.common.ops import FUSION_GROUP


class DispatchRecorder(TorchDispatchMode):
    """Records every aten op dispatched while active (Python calls and at:: calls from C++ alike)."""

    def __init__(self, sampler=None):
        super().__init__()
        self.ops: list[str] = []
        # tensor data one call handed to host code, the most of any call (each ``with recorder:`` is one forward
        # call): device data copied to the host, and values read one at a time into Python (``.item()``,
        # ``float(t)``, iterating a tensor: ``_local_scalar_dense``, on any device; a host tensor's ``tolist`` and
        # ``numpy``: HOST_READS). Compute done there is not a kernel's
        self.to_host_bytes = 0
        self._call_bytes = 0
        self.removed = False  # a watched call found another dispatch mode on top when it returned
        self.conversions: list = []  # (op, source, target dtype) of floating values copied to integers or booleans
        self.rounded: list[str] = []  # host conversions found to round as they happened
        self._seen_conversions = 0
        # the sampler of forward's CPU time (cpu: verifier/child/sampler.py) while a watched call runs: the host
        # conversions' check runs in its library, whose samples are nobody's compute (``rounds_host``)
        self.sampler = sampler

    def __enter__(self):
        self._call_bytes = 0
        self._read_by_host = _watch_host_reads(self)
        return super().__enter__()

    def __exit__(self, *exc):
        _unwatch_host_reads(self._read_by_host)
        self.to_host_bytes = max(self.to_host_bytes, self._call_bytes)
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.ops.append(f"{func.namespace}::{name}")
        out = func(*args, **(kwargs or {}))
        if name == "_local_scalar_dense" and args and isinstance(args[0], torch.Tensor):
            self._call_bytes += args[0].element_size()
        if name in ("_to_copy", "copy_", "to") and args and isinstance(args[0], torch.Tensor):
            src = args[1] if name == "copy_" and len(args) > 1 and isinstance(args[1], torch.Tensor) else args[0]
            dst = args[0] if name == "copy_" else out
            if isinstance(dst, torch.Tensor) and src.device.type != "cpu" and dst.device.type == "cpu":
                self._call_bytes += dst.numel() * dst.element_size()
            if (isinstance(dst, torch.Tensor) and src.is_floating_point() and not dst.is_floating_point()
                    and not dst.is_complex()):
                self._conversion(f"aten::{name}", src.detach(), dst.dtype)
        return out

    def _conversion(self, op: str, src: torch.Tensor, dtype: torch.dtype) -> None:
        """Every conversion of floating values to an integer or boolean dtype is judged: on the host at once, with
        numpy (no aten op, so the profiler sees nothing of the check); a device's (or a dtype numpy lacks) after the
        call (``rounding_ops``), kept by a uniform sample of ``MAX_CONVERSIONS`` over all of them, drawn from the
        system's entropy, so that whole-valued conversions made first cannot push a rounding one out of view."""
        if src.device.type == "cpu" and src.dtype in (torch.float32, torch.float64, torch.float16) and np is not None:
            if not self.rounded and rounds_host(src, dtype, self.sampler):
                self.rounded.append(f"{op}({src.dtype}->{dtype}, rounding)")
            return
        self._seen_conversions += 1
        if len(self.conversions) < MAX_CONVERSIONS:
            self.conversions.append((op, src, dtype))
        else:
            k = _ENTROPY.randrange(self._seen_conversions)
            if k < MAX_CONVERSIONS:
                self.conversions[k] = (op, src, dtype)

    def rounding_ops(self) -> list[str]:
        """The conversions of floating values to an integer or boolean dtype that computed (``rounds``): those
        judged on the host as they happened, and the device's, read once the call and its profiler session are
        over (the check's own ops are then nobody's); the lists are emptied."""
        out = self.rounded + [f"{op}({src.dtype}->{dtype}, rounding)" for op, src, dtype in self.conversions
                              if rounds(src, dtype)]
        self.conversions.clear()
        self.rounded = []
        self._seen_conversions = 0
        return out

    def compute_ops(self, own=None) -> list[str]:
        """What this monitor saw (the ops and the rounding conversions), less the operators the candidate created
        (``own``: its ``oplib.Registry``): the judge counts every other one as compute."""
        return sorted({o for o in self.ops + self.rounding_ops() if own is None or not own.created(o)})


# Tensor methods that hand a host tensor's data to Python with no aten op (``tolist`` reads the storage in C++,
# ``numpy`` and ``__dlpack__`` (``np.from_dlpack``'s) share it, ``__array__``, numpy's conversion, goes through
# ``numpy``; ``apply_``, ``map_`` and ``map2_``
# run a Python callable on every element): counted as the dispatched reads are, while a call is watched (the tensor
# the method is called on; ``map_``'s and ``map2_``'s others as well). A device tensor's reach the host by a copy,
# which the dispatch above counts.
HOST_READS = ("tolist", "numpy", "__dlpack__", "apply_", "map_", "map2_")


def _watch_host_reads(recorder: "DispatchRecorder") -> dict:
    """Wrap HOST_READS on torch.Tensor for the watched call; returns what ``_unwatch_host_reads`` puts back."""
    saved = {}
    for name in HOST_READS:
        saved[name] = torch.Tensor.__dict__.get(name)
        real = getattr(torch.Tensor, name)

        def read(t, *args, _real=real, **kwargs):
            for x in (t, *args):
                if isinstance(x, torch.Tensor) and x.device.type == "cpu":
                    recorder._call_bytes += x.numel() * x.element_size()
            return _real(t, *args, **kwargs)

        setattr(torch.Tensor, name, read)
    return saved


def _unwatch_host_reads(saved: dict) -> None:
    for name, value in saved.items():
        if value is None:
            delattr(torch.Tensor, name)
        else:
            setattr(torch.Tensor, name, value)


MAX_CONVERSIONS = 32  # device conversions kept per call for ``rounds``: a uniform sample over all of them
_ENTROPY = random.SystemRandom()


def rounds_host(src: torch.Tensor, dtype: torch.dtype, sampler=None) -> bool:
    """``rounds`` for a host tensor of float32, float64 or float16, with no aten op: in the CPU sampler's library where
    a watched call is sampled (``sampler``: inside the call, numpy's samples would be a vendor's compute in the
    candidate's forward: an honest conversion of whole values, 64 x 1000 floats, was C01 in a loaded suite run),
    else with numpy on a view of it."""
    if src.numel() == 0:
        return False
    if sampler is not None:
        got = sampler.not_whole(src.data_ptr(), src.element_size(), tuple(src.shape), tuple(src.stride()),
                                dtype == torch.bool)
        if got is not None:
            return got
    a = torch._C.TensorBase.numpy(src)  # the method itself: a watched call's HOST_READS count the candidate's reads
    if dtype == torch.bool:
        return bool(((a != 0) & (a != 1)).any())
    return bool((a != np.trunc(a)).any())


def rounds(src: torch.Tensor, dtype: torch.dtype) -> bool:
    """A copy that computes: floating values converted to an integer or boolean dtype where one of them is not
    already that dtype's value (a fraction truncated, a value made true or false). Converting values that are
    already whole (indices a kernel wrote as floats) moves data; converting 0.7 to 0 is ``trunc``."""
    if src.numel() == 0:
        return False
    with torch.no_grad():
        if dtype == torch.bool:
            return bool(((src != 0) & (src != 1)).any())
        return bool((src != torch.trunc(src)).any())


def watched(fn, recorder: DispatchRecorder, sampler=None):
    """``fn`` as every checked call runs it: under ``recorder`` and inside a ``km_forward`` marker (the profiler
    counts only what happens within it), and on cpu with ``sampler`` (verifier/child/sampler.py) recording where its
    CPU time goes. Used for timed calls too, so a timed call looks like a checked one; ``recorder.removed`` says if a
    call took the dispatch monitor off."""
    recorder.sampler = recorder.sampler or sampler

    def call(*inputs):
        with recorder:
            with record_function("km_forward"):
                if sampler is not None:
                    sampler.on()
                try:
                    out = fn(*inputs)
                finally:
                    if sampler is not None:
                        sampler.off()
            if _get_current_dispatch_mode() is not recorder:
                recorder.removed = True
        return out

    return call


def profiled(backend):
    """The profiler session of a phase. On cpu it records the aten ops of every thread of the process (Kineto's
    ``profile_all_threads``), not only the calling one's: at:: compute the candidate's C++ runs on a
    ``std::thread`` it starts and joins inside forward reaches neither the dispatch mode nor a thread-local
    profiler (docs/ANTI_CHEAT.md class 22), and falls inside the ``km_forward`` window like any op of the call. On
    cuda the device view (CUPTI) sees every thread's kernels already, and the session is left as measured on the
    H100."""
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if backend.name == "cuda" else [])
    every_thread = _every_thread_config() if backend.name == "cpu" else None
    return profile(activities=acts, **({"experimental_config": every_thread} if every_thread is not None else {}))


def _every_thread_config():
    """Kineto's all-threads setting where this torch has it (torch 2.13 does), else None (this thread only)."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(profile_all_threads=True)
    except (ImportError, TypeError):
        return None


class Windows:
    """Time windows (the ``km_forward`` markers' ranges) asked whether an event's range overlaps any of them, in
    log time: the timing phase's profile holds thousands of calls' markers and tens of thousands of events."""

    def __init__(self, windows: list[tuple]):
        ordered = sorted(windows)
        self.starts = [a for a, _ in ordered]
        self.reach, top = [], float("-inf")  # the latest end among the windows up to each one
        for _, b in ordered:
            top = max(top, b)
            self.reach.append(top)

    def __bool__(self) -> bool:
        return bool(self.starts)

    def overlaps(self, start, end) -> bool:
        """Whether some window (a, b) has a < end and b > start."""
        i = bisect.bisect_left(self.starts, end)  # windows[:i] start before ``end``
        return i > 0 and self.reach[i - 1] > start


def _inside(e, windows: Windows) -> bool:
    r = getattr(e, "time_range", None)
    if r is None:
        return True
    return windows.overlaps(r.start, r.end)


def operators() -> set[str]:
    """Every operator the dispatcher knows now, as ``ns::op`` (overloads dropped): what tells an operator's profiler
    event from a label."""
    return {n.split(".", 1)[0] for n in torch._C._dispatch_get_all_op_names()}


# the CUDA runtime's and driver's launches of a graph, as the profiler names their calls
GRAPH_LAUNCH = ("cudaGraphLaunch", "cuGraphLaunch")


def read_profile(prof, kernel_names: list[str], rec: TrialReport, registry=None) -> int:
    """aten ops the profiler saw inside the ``km_forward`` markers, the marker that proves it watched the call,
    and (cuda) the device time of kernels run within the marker's device-side ranges: in a session that also
    drew inputs and flushed caches (the timing phase), only what forward itself did counts. aten ops nested inside
    another op's kernel (one of the candidate's own operators calling ``at::matmul``) are among them: the profiler
    observes every operator call, where a dispatch mode handles only the outermost. ``registry`` is the candidate's
    operator registry (verifier/child/oplib.py ``Registry``): the operators it created are left out of
    ``profiled_ops`` (the judge counts every other one as compute), and the count of calls of them among the op
    events inside the markers is returned (0 without it)."""
    events = list(prof.events())
    host_win, dev_win = [], []
    for e in events:
        if e.name == "km_forward" and getattr(e, "time_range", None) is not None:
            (dev_win if "cuda" in str(getattr(e, "device_type", "")).lower() else host_win).append(
                (e.time_range.start, e.time_range.end))
    names, own, foreign, ops, known, graphs = [], 0.0, {}, [], None, 0
    host_win, dev_win = Windows(host_win), Windows(dev_win)
    for e in events:
        dev = str(getattr(e, "device_type", "")).lower()
        if e.name == "km_forward":
            continue
        if "cuda" in dev:
            if dev_win and not _inside(e, dev_win):
                continue
            us = float(e.time_range.elapsed_us()) if getattr(e, "time_range", None) else 0.0
            if is_own_kernel(e.name, kernel_names):
                own += us
            else:
                foreign[e.name[:160]] = foreign.get(e.name[:160], 0.0) + us
            continue
        if e.name.startswith(GRAPH_LAUNCH) and (not host_win or _inside(e, host_win)):
            graphs += 1  # the runtime's call: what the graph runs shows among the device's kernels, no op explains it
            continue
        if ("::" in e.name or FUSION_GROUP.match(e.name)) and (not host_win or _inside(e, host_win)):
            ops.append(e.name)
            # an operator of any namespace (its own are left out by the caller), or a fusion group; a
            # record_function label that merely contains "::" names no operator
            if e.name.startswith("aten::") or FUSION_GROUP.match(e.name):
                names.append(e.name)
            else:
                known = operators() if known is None else known
                if e.name.split(".", 1)[0] in known:
                    names.append(e.name)
    rec.profiled_ops = sorted({n for n in names if registry is None or not registry.created(n)})
    rec.own_kernel_us = round(own, 3)
    rec.foreign_kernel_us = {k: round(v, 3) for k, v in foreign.items()}
    rec.graph_launches = graphs
    if not host_win:
        rec.monitor_problems.append("the profiler stopped recording during forward")
    return registry.calls(ops) if registry is not None else 0


# ---------------------------------------------------------------------------- side work on threads (C09)
# Side work is work the timing misses: a thread of the candidate's that is still running after the call returned.
# A thread that is merely there is not: an OpenMP pool (``#pragma omp parallel for num_threads(2)``) outlives every
# call with its workers parked on a futex, using no CPU until the next region. So the threads are judged by what
# they do after the call, from the kernel's per-thread CPU accounting, not counted.

QUIET_S = 0.05  # idle this long: parked (a 20 ms sleep loop never is; libgomp's spin after a region: 8-15 ms here)
SETTLE_S = 1.0  # how long a check waits at most for the candidate's threads to park


def thread_ids() -> set[str]:
    """The ids of this process's threads (``/proc/self/task``; Python's threads where that cannot be read)."""
    try:
        return set(os.listdir("/proc/self/task"))
    except OSError:
        return {f"py{t.native_id}" for t in threading.enumerate()}


def thread_run(tid: str) -> tuple | None:
    """How much thread ``tid`` has run so far: (ns on a cpu, times scheduled) from its schedstat, or (utime + stime
    in clock ticks, context switches) where the kernel keeps no schedstat; None when it cannot be read (ended)."""
    base = f"/proc/self/task/{tid}"
    try:
        with open(f"{base}/schedstat") as f:
            run_ns, _, slices = f.read().split()[:3]
        return int(run_ns), int(slices)
    except (OSError, ValueError):
        pass
    try:
        with open(f"{base}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"{base}/status") as f:
            switches = sum(int(ln.split()[1]) for ln in f if "ctxt_switches:" in ln)
        return int(fields[11]) + int(fields[12]), switches
    except (OSError, ValueError, IndexError):
        return None


def threads_beside(baseline: set[str]) -> dict[str, tuple | None]:
    """This process's threads not in ``baseline`` (the verifier's own, taken before the candidate was imported),
    each with how much it has run: read right as a call returns, it is what ``side_work_threads`` judges."""
    return {t: thread_run(t) for t in thread_ids() - baseline}


def side_work_threads(seen: dict, baseline: set[str], *, ended_counts: bool = True) -> int:
    """How many of the candidate's threads (``seen``: ``threads_beside`` read as the call returned) did side work
    after it: one that kept running (never idle for ``QUIET_S`` within ``SETTLE_S``), one started after the call,
    and (``ended_counts``) one that ended meanwhile (it was still at work when the call was over: a detached
    ``std::thread`` finishing the output). A thread idle for a whole ``QUIET_S`` is parked and not counted.
    Waits only while some thread is still undecided; returns at once when the candidate has no thread.

    Not covered: a thread that works for a while after the call and then parks on a futex within ``SETTLE_S`` (a
    pool of the candidate's own that finishes the output late): the trial's output is read before this check, and
    the harness sees a late or wrong timed output (C16). Without /proc every thread of the candidate's counts."""
    if not seen:
        return 0
    start = time.monotonic()
    last = dict(seen)
    changed = {t: start for t in seen}
    busy = sum(1 for r in seen.values() if r is None)  # unreadable at the call's return: cannot be judged idle
    pending = {t for t, r in seen.items() if r is not None}
    while pending:
        time.sleep(0.01)
        now = time.monotonic()
        late = thread_ids() - baseline - set(seen)
        if late:  # started after the call returned, by a thread of the candidate's
            busy += len(late)
            seen = {**seen, **{t: None for t in late}}
        for t in sorted(pending):
            run = thread_run(t)
            if run is None:  # ended after the call
                pending.discard(t)
                busy += 1 if ended_counts else 0
            elif run != last[t]:
                last[t], changed[t] = run, now
            elif now - changed[t] >= QUIET_S:
                pending.discard(t)  # parked
        if now - start >= SETTLE_S:
            return busy + len(pending)
    return busy
