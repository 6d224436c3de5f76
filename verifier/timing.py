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
               prefix: str, budget_s: float = 0.0) -> ModelTiming:
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
    if budget_s > 0 and host_us:  # a slow call gets fewer timed iterations, not a timeout (do_bench does the same)
        call_s = max(host_us) * 1e-6
        seeds = seeds[:max(3, min(len(seeds), int(budget_s / max(call_s, 1e-9))))]
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


def fit_counts(timing: ModelTiming, probes: int, budget_s: float = 5.0) -> tuple[int, float]:
    """How many one-at-a-time probe calls fit ``budget_s`` for a model whose timed calls took ``timing``'s
    device times (at least 2), and that median call time in seconds."""
    call_s = (sorted(timing.device_us)[len(timing.device_us) // 2] * 1e-6) if timing.device_us else 0.0
    if call_s <= 0:
        return probes, call_s
    return max(2, min(probes, int(budget_s / call_s))), call_s


def output_sum(out) -> torch.Tensor:
    """A float64 sum of every element of the outputs, on their device (no synchronisation)."""
    parts = [t.detach().to(torch.float64).sum() for t in (out if isinstance(out, (list, tuple)) else [out])
             if isinstance(t, torch.Tensor)]
    return torch.stack(parts).sum() if parts else torch.zeros((), dtype=torch.float64)


def run_bracket(backend, fn, seeds: list[int], draw) -> list[float]:
    """One bracket of the verifier's clock (verifier/channel.py): a call on fresh inputs per seed, back to
    back, then every call's output sum; the sums reach the host only when all the work is done."""
    sums = []
    for seed in seeds:
        inputs = draw(seed)
        out = fn(*inputs)
        sums.append(output_sum(out).to(backend.device))
        del out, inputs
    return [float(x) for x in torch.stack(sums).cpu().tolist()] if sums else []
