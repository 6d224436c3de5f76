"""Timing inside an execution child: the same code times the candidate and the references.

Per iteration fresh inputs drawn from the iteration's seed, the last-level cache flushed, a device-side wait
long enough for the host to queue the whole call, then CUDA events around the call; no synchronisation
between iterations (the protocol of triton's ``do_bench``; bench/bench_timing_truth.py compares the two).
Launch-inclusive times and the C09 idle gap come from separate probe calls, one at a time.
Imports: torch and the standard library only.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import torch

from verifier.contract import ModelTiming
from verifier.inputs import nbytes


def clone(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, (list, tuple)):
        return type(obj)(clone(o) for o in obj)
    return obj


def plain_cpu(out):
    if isinstance(out, torch.Tensor):
        return out.detach().to("cpu").clone()
    return [plain_cpu(t) for t in out]


def time_model(backend, fn, seeds: list[int], draw, warmup: int, keep: int, job_dir: Path,
               prefix: str) -> ModelTiming:
    """Device time of ``fn`` per timed iteration (fresh inputs from each seed, cache flushed before each).

    The host is kept ahead of the device: a device-side wait of about twice the host's time for one call is
    queued before the start event, so the events bracket what the device executes, not how fast this
    process got the launches out; there is no synchronisation between iterations. ``keep`` timed
    iterations, picked here at random and unknown to the candidate (nothing distinguishes them while fn
    runs), have their outputs copied after the end event and saved as ``<prefix>_<j>.pt`` for the verifier
    to check (C16); the others are dropped, so every call allocates from the same cached memory."""
    warm = seeds[:warmup]
    host_us = []
    for seed in warm:
        inputs = draw(seed)
        backend.flush_cache()
        backend.synchronize()
        t0 = time.perf_counter()
        out = fn(*inputs)
        host_us.append((time.perf_counter() - t0) * 1e6)
        backend.synchronize()
        del out, inputs
    host = sorted(host_us)[len(host_us) // 2] if host_us else 0.0
    hide = min(max(backend.hide_launch_us, 2.0 * host), 20_000.0) if backend.hide_launch_us > 0 else 0.0
    picks = set(secrets.SystemRandom().sample(range(len(seeds)), min(keep, len(seeds)))) if keep else set()
    marks, kept = [], {}
    budget = backend.keep_budget()
    for j, seed in enumerate(seeds):
        inputs = draw(seed)
        backend.flush_cache()
        backend.wait_on_device(hide)
        start = backend.mark()
        out = fn(*inputs)
        end = backend.mark()
        marks.append((start, end))
        if j in picks:  # outside the events; on the device while it fits, so the device does not idle
            size = nbytes(out)
            kept[j] = clone(out) if size <= budget else plain_cpu(out)
            budget -= size if size <= budget else 0
        del out, inputs
    backend.synchronize()
    timing = ModelTiming(device_us=[round(backend.elapsed_us(a, b), 3) for a, b in marks])
    for j, out in sorted(kept.items()):
        if prefix:
            torch.save(plain_cpu(out), job_dir / f"{prefix}_{j}.pt")
        timing.kept.append(j)
    return timing


def probe_pairs(backend, fn, ref, seeds: list[int], draw, n: int) -> tuple[list[float], list[float], list[float]]:
    """``probe_calls`` of ``fn`` interleaved with the same probes of the reference ``ref`` in the same process:
    (fn's launch-inclusive times, fn's idle gaps, the reference's idle gaps). The two gap series share the
    machine's load at that moment, so comparing them (C09) does not blame a late host wake-up on the
    candidate; each probe starts from an idle device, so nothing of one call spills into the next."""
    launch, gaps, ref_gaps = [], [], []
    for i in range(n):
        seed = [seeds[i % len(seeds)]]
        (la,), (ga,) = probe_calls(backend, fn, seed, draw, 1)
        _, (gr,) = probe_calls(backend, ref, seed, draw, 1)
        launch.append(la)
        gaps.append(ga)
        ref_gaps.append(gr)
    return launch, gaps, ref_gaps


def probe_calls(backend, fn, seeds: list[int], draw, n: int) -> tuple[list[float], list[float]]:
    """``n`` calls one at a time: launch-inclusive time (host call start to every stream idle) and the
    device idle-minus-end gap (cuda: work left running after the timed stream's end event, C09)."""
    launch, gaps = [], []
    for i in range(n):
        inputs = draw(seeds[i % len(seeds)])
        backend.flush_cache()
        backend.synchronize()
        out, us, idle_us, wall_us = backend.probe_call(lambda: fn(*inputs))
        launch.append(round(wall_us, 3))
        gaps.append(round(idle_us - us, 3))
        del out, inputs
    return launch, gaps
