"""The reference job inside an execution child (verifier/child/worker.py ``run_job``): the task's eager reference (and
the null bracket) or ``torch.compile`` of it, timed by the harness (verifier/execute/harness.py) in a process where no candidate code has
ever run, so nothing a candidate does to torch can change the reference's times.
Imports: torch, the standard library and verifier/child + verifier/common.
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path

import torch

from verifier.child.channel import Channel
from verifier.child.harness_client import BracketClient
from verifier.child.loading import exec_module
from verifier.child.sampler import Sampler
from verifier.child.monitors import (
    DispatchRecorder,
    watched,
)
from verifier.child.timing import (
    PhaseClock,
    brackets,
    drawer,
    forward_waits_on_host,
    probe_calls,
    probe_count,
)
from verifier.common import hostwait, priority
from verifier.common.contract import (
    COMPILE_CACHE,
    ChildReport,
    Job,
    ModelTiming,
)
from verifier.common.devlock import device_lock
from verifier.common.inputs import (
    as_list,
    build_model,
)


def run_reference(job: Job, job_dir: Path, report: ChildReport, backend) -> ChildReport:
    """The timings of the task's reference: the eager model and the null bracket (``job.time_eager``), and
    ``torch.compile`` of the model (``job.time_torch_compile``); the verifier asks for them in two jobs, so that a
    task's candidates start on the eager time while the compiled model is still being built (verifier/runs.py).
    Inductor builds the compiled model (host work: tracing, code generation, the compilers; tens of seconds for a
    level-3 network) before the device lock is taken, as the compile pool builds candidates beside a timing: holding
    the lock exclusive for the build stopped every other process's trials and timing for as long (KernelBench's real
    code on an H100: 7 + 7 s of lock waits per candidate with the compiled reference timed, 1.3 + 0.5 s without).
    The build's first call runs the graph once on the device; everything timed runs under the exclusive lock."""
    clock = PhaseClock(report)
    device = backend.device
    try:
        ref = exec_module("km_reference", job.reference_code, "reference.py")
        model, _ = build_model(ref, job.init_seed, device, job.reference_code, job.eval_mode)
        ch = Channel(job_dir)
    except Exception:  # noqa: BLE001
        report.setup_error = traceback.format_exc(limit=4)[-3000:]
        return report
    clock.phase("load")
    draw = drawer(ref, device, job.reference_code)
    with torch.no_grad():
        try:
            seeds = ch.timing_seeds()
        except Exception:  # noqa: BLE001
            report.timing_error = traceback.format_exc(limit=3)[-2500:]
            return report
        cache = job_dir / COMPILE_CACHE if not job.time_eager and (job_dir / COMPILE_CACHE).is_dir() else None
        compiled = build_compiled(model, draw, seeds, backend, report, cache) if job.time_torch_compile else None
        clock.phase("compile_build")
        if not job.time_eager and compiled is None:
            return report  # nothing left to time (``compile_error`` says why)
        models = {"reference": model} if job.time_eager else {}
        if compiled is not None:
            models["compiled"] = compiled
        # on cpu the candidate's timed calls run under the dispatch monitor and the sampler of their CPU time
        # (verifier/child/sampler.py, a thread that costs a watched call a few percent of a core), whose host cost
        # would be the candidate's alone: the reference and the null pay them too (on cuda the host is ahead of the
        # device and the monitors cost no device time). The reference's samples are not read.
        sampler = Sampler(job.cpu_sampler if job.backend == "cpu" else "")
        sampler.start()
        if sampler.error:
            report.events.append(sampler.error)
        wrap = (lambda f: watched(f, DispatchRecorder(), sampler if sampler.started else None)) \
            if job.backend == "cpu" else (lambda f: f)
        with device_lock(job.timing_lock or None) as lock:
            # whether each model waits on the host (its brackets' gates then open without the long wait,
            # verifier/execute/harness.py): device work, held shared; its first calls' costs fall here, not in the
            # exclusive hold
            waits = {}
            if job.backend == "cuda":
                lock.acquire(False, job.lock_wait_s)
                give_way = lambda: lock.yield_to_timer(job.lock_wait_s)  # noqa: E731
                for label, m in models.items():
                    waits[label] = forward_waits_on_host(backend, m, draw, seeds, give_way)
            # the compiled model alone (its own job): nobody waits for it yet, so it goes behind the timers queued
            report.timing_exclusive = lock.acquire(True, job.lock_wait_s, behind_timers=not job.time_eager)
            report.lock_wait_s = round(lock.waited_s, 4)
            clock.phase("lock_wait")
            clocked = BracketClient(ch, job.backend, lambda: draw(seeds[0]))
            # held alone: waits spin, as the candidate's (verifier/common/hostwait.py)
            with hostwait.held_alone(job.backend):
                try:
                    backend.warm_device(job.warm_device_ms)
                    clock.part("warm_device")
                    if job.time_eager:  # the harness (the verifier's process) clocks every bracket; this one calls
                        template = [t.clone() for t in as_list(model(*draw(seeds[0])))]
                        clock.part("template")
                        brackets(clocked, "reference", wrap(model), job.n_brackets, waits.get("reference", False))
                        clock.part("reference_brackets")
                        brackets(clocked, "null", wrap(lambda *x: template), 2 * job.n_brackets)
                        clock.part("null_brackets")
                        n = probe_count(backend, model, draw, seeds, job.gap_probes)
                        report.eager = ModelTiming()
                        report.eager.launch_us, report.eager.idle_gap_us = probe_calls(backend, model, seeds, draw,
                                                                                       n)
                        clock.part("probes")
                        clock.phase("eager")
                except Exception:  # noqa: BLE001
                    report.timing_error = traceback.format_exc(limit=3)[-2500:]
                if compiled is not None and not report.timing_error:
                    try:
                        brackets(clocked, "compiled", wrap(compiled), job.n_brackets, waits.get("compiled", False))
                        report.compiled = ModelTiming()
                    except Exception as e:  # noqa: BLE001
                        report.compile_error = f"{type(e).__name__}: {str(e)[:300]}"
                    clock.phase("compile")
        sampler.stop()
    return report


REFERENCE_COMPILE_THREADS = 1  # inductor's compile_threads for the reference's torch.compile (1: no worker pool)


def build_compiled(model, draw, seeds: list[int], backend, report: ChildReport, cache: Path | None = None):
    """``torch.compile(model)`` built by one call on the first timing seed's inputs, outside the device lock;
    None (and ``report.compile_error``) when it does not build or run. ``cache``: the job's copy of the machine's kept
    inductor and triton caches (verifier/execute/compile_cache.py), which the build reads and adds to."""
    try:
        # inductor compiles in this process: its default pool starts a compile worker per core (16 processes, each
        # importing torch and triton) for every task's reference, CPU the candidates' builds need more
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = REFERENCE_COMPILE_THREADS
        # (both read where a build needs them, after this; not where the job's filesystem may not map a built
        # library as code: a noexec /dev/shm would fail every build that the scratch lets through)
        if cache is not None and not os.statvfs(cache).f_flag & os.ST_NOEXEC:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
            os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")
            # its precompiled header (~150 MB) is made in a directory fixed when inductor was imported (the scratch,
            # emptied after every job): ~9 s a task on 2 cores, for one build that compiles as fast without it
            inductor_config.cpp_cache_precompile_headers = False
        compiled = torch.compile(model)
        # a build, at the builds' priority (the timing after it at the child's own: priority.session_at)
        with priority.session_at(priority.BUILD):
            out = compiled(*draw(seeds[0]))
            backend.synchronize()
        del out
        return compiled
    except Exception as e:  # noqa: BLE001
        report.compile_error = f"{type(e).__name__}: {str(e)[:300]}"
        return None
