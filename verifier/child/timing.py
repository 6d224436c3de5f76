"""Timing inside an execution child, for both kinds of job: the brackets the harness clocks (:func:`brackets`), the
probes (launch-inclusive times and the C09 idle gap, one call at a time), the job's seconds per phase
(:class:`PhaseClock`) and the trial inputs drawn from a seed (:func:`drawer`).

These are first signals only, reported by a process the candidate controls. The times a verdict reports are
measured by the harness in the verifier's process (verifier/execute/harness.py), never here.
Imports: torch, the standard library and verifier/child + verifier/common.
"""

from __future__ import annotations

import time

import torch

from verifier.child.harness_client import BracketClient
from verifier.common.contract import ChildReport
from verifier.common.inputs import draw_inputs


def clone(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, (list, tuple)):
        return type(obj)(clone(o) for o in obj)
    return obj


def plain_cpu(out):
    if isinstance(out, torch.Tensor):  # one copy, a private one (``to`` alone returns a CPU tensor itself)
        return out.detach().to("cpu", copy=True)
    return [plain_cpu(t) for t in out if t is not None]  # None: an output left out (inputs.as_list)


def probe_calls(backend, fn, seeds: list[int], draw, n: int) -> tuple[list[float], list[float]]:
    """``n`` calls one at a time: launch-inclusive time (host call start to every stream idle) and the
    device idle-minus-end gap (cuda: work left running after the timed stream's end event, C09)."""
    launch, gaps = [], []
    for i in range(n):
        inputs = draw(seeds[i % len(seeds)])
        backend.flush_cache()
        backend.synchronize()
        out, us, idle_us, wall_us = backend.probe_call(lambda x=inputs: fn(*x))
        launch.append(round(wall_us, 3))
        gaps.append(round(idle_us - us, 3))
        del out, inputs
    return launch, gaps


class PhaseClock:
    """The job's seconds per phase (``ChildReport.phase_s``), each phase ending where the next begins."""

    def __init__(self, report: ChildReport):
        self.report, self.t = report, time.perf_counter()
        self.start = self.part_t = self.t

    def phase(self, name: str) -> None:
        now = time.perf_counter()
        self.report.phase_s[name] = round(now - self.t, 4)
        self.t = self.part_t = now

    def part(self, name: str) -> None:
        """Add the seconds since the last part (or phase) to ``name``: the pieces of a phase that repeats (a trial's
        seeds, inputs, forward, profiler, output...), summed over its repetitions; the phase keeps its own total."""
        now = time.perf_counter()
        self.report.phase_s[name] = round(self.report.phase_s.get(name, 0.0) + now - self.part_t, 4)
        self.part_t = now


def brackets(client: BracketClient, label: str, fn, most: int, host_waits: bool = False, after=None) -> None:
    """Up to ``most`` clocked brackets of ``fn`` (a first one of a single call, the probe); the harness answers
    "enough" once it has what it needs. ``host_waits``: whether ``fn`` waits on the host (told with each).
    ``after(seq)``: called after each bracket with the harness's number of it (cpu: its samples taken)."""
    for _ in range(most + 1):
        if client.bracket(label, fn, host_waits) == "enough":
            return
        if after is not None:
            after(client.seq)


def warm_up(backend, fn, draw, seeds: list[int], n: int, give_way=None) -> float:
    """The child's own warm-up: ``fn`` called on the inputs of the first ``n`` seeds (first-call costs: lazy module
    loads, library handles); nothing here is measured for a verdict. With ``give_way`` (cuda, the shared hold), the
    device idle and ``give_way()`` between two calls (a slow model's three calls held a waiting timer 1.2 s), and the
    least host time of the calls after the first is returned, each made with nothing queued ahead (what
    ``forward_waits_on_host`` needs); else the calls queue behind each other and inf is returned."""
    host_s = float("inf")
    for k, seed in enumerate(seeds[:n]):
        inputs = draw(seed)
        if k and give_way is not None:
            backend.synchronize()
            give_way()
        t0 = time.perf_counter()
        out = fn(*inputs)
        if k and give_way is not None:
            host_s = min(host_s, time.perf_counter() - t0)
        del out, inputs
    backend.synchronize()
    return host_s


WAIT_CHECKS = 2  # calls asked whether they wait on the host (each must: one slowed by the host's load is not)


def forward_waits_on_host(backend, fn, draw, seeds: list[int], give_way=lambda: None,
                          host_s: float = float("inf")) -> bool:
    """Whether ``fn`` (a forward) waits on the host for the device work queued before it, asked of
    WAIT_CHECKS calls on fresh inputs (``Backend.waits_on_host``), each behind a delay longer than its host time
    (``host_s``, the least of warmed-up calls with nothing queued ahead: ``warm_up``'s; measured here on two calls
    where not given); False where the check itself fails (the timing goes on without the hint). ``give_way()`` runs
    before each call, the device idle (a shared holder's point of giving way: a slow model's four calls are not one
    piece of work)."""
    try:
        inputs = draw(seeds[0])
        for _ in range(0 if host_s < float("inf") else 2):  # nothing queued ahead; a first call's are lazy loads
            backend.synchronize()
            give_way()
            t0 = time.perf_counter()
            out = fn(*inputs)
            host_s = min(host_s, time.perf_counter() - t0)
            del out
        for i in range(WAIT_CHECKS):
            inputs = draw(seeds[(i + 1) % len(seeds)])
            backend.synchronize()
            give_way()
            if not backend.waits_on_host(lambda: fn(*inputs), host_s):
                return False
        return True
    except Exception:  # noqa: BLE001 - a forward that fails here fails its timed brackets, where it is reported
        return False


# the one-at-a-time probes' share of a timing's exclusive hold of the device: their figure (``launch_us``) informs a
# verdict and decides nothing, yet at 2 s they were a fifth of the candidates' hold of the device on one H100's real
# batch (0dae5de: 0.22 s a timed candidate of 1.03, a slow model's ten calls up to 2 s) while every other slot's
# trials waited
PROBE_BUDGET_S = 0.25


def probe_count(backend, fn, draw, seeds: list[int], most: int, budget_s: float = PROBE_BUDGET_S) -> int:
    """One-at-a-time probe calls that fit ``budget_s`` (at least 2), from one call's host time."""
    inputs = draw(seeds[0])
    backend.synchronize()
    t0 = time.perf_counter()
    out = fn(*inputs)
    backend.synchronize()
    call_s = time.perf_counter() - t0
    del out, inputs
    return max(2, min(most, int(budget_s / max(call_s, 1e-9))))


def drawer(ref, device: str, program_text: str):
    def draw(seed: int) -> list:
        return draw_inputs(ref.get_inputs, seed, device, program_text)
    return draw
