"""Stages 4-6 inside an execution child: one process per job, started by verifier/engine.py.

The child is forked from a fork server (``--serve``, verifier/child/forkserver.py) that runs this module's ``main`` for
each job, or is a fresh interpreter running ``python -m verifier.child.worker JOB_DIR``; this module is the job itself.

A job (verifier/common/contract.py) is one of two kinds:

- ``candidate``: the candidate's correctness trials, runtime checks and timing. Inputs are drawn here from
  the trial seeds exactly as the verifier draws them (verifier/common/inputs.py; on the device, so no input ever
  goes through a file) unless the job ships them. Every trial runs under two independent monitors of
  the aten ops ModelNew dispatches: a TorchDispatchMode, and the profiler (a C++ observer of the dispatcher
  that a dispatch-mode trick does not switch off; on cuda it also gives each kernel's device time, from
  which the share of time in the candidate's own kernels is reported). A snapshot of torch's functions and
  flags taken before the candidate is imported is compared after every phase; on the first change the
  child writes ``flags.json`` and stops (a patched check is a C11 verdict in seconds, not a timeout).
- ``reference``: the eager reference and ``torch.compile`` of it timed in a process where no candidate
  code has ever run, so nothing a candidate does to torch can change the reference's times
  (verifier/child/reference.py).

Timing (both kinds, the same code) is verifier/child/timing.py; the two op monitors are verifier/child/monitors.py;
how a program and the candidate's prebuilt extensions are loaded is verifier/child/loading.py.

What this process does NOT decide: whether outputs are correct. Outputs go to files; the verifier
compares them with reference outputs it computes itself. A crash, hang or memory blow-up of this
process is turned into a verdict by the parent.

Imports: torch and the standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.utils.cpp_extension as cpp_extension
from torch.profiler import record_function
from torch.utils._python_dispatch import _get_current_dispatch_mode

from verifier.child.channel import Channel
from verifier.child.harness_client import BracketClient
from verifier.child.knockout import ChildKnockout
from verifier.child.loading import KERNEL_CALLS, exec_module, giving_way, make_prebuilt_load_inline
from verifier.child.monitors import (
    DispatchRecorder,
    profiled,
    read_profile,
    side_work_threads,
    thread_ids,
    threads_beside,
    watched,
)
from verifier.child.oplib import Registry
from verifier.child.reference import run_reference
from verifier.child.sampler import Sampler, merge
from verifier.child.tamper import Snapshot
from verifier.child.timing import (
    PhaseClock,
    brackets,
    clone,
    drawer,
    forward_waits_on_host,
    plain_cpu,
    probe_calls,
    probe_count,
    warm_up,
)
from verifier.common import childenv, hostwait
from verifier.common.backends import get_backend
from verifier.common.contract import (
    FLAGS_FILE,
    JOB_FILE,
    ChildReport,
    Job,
    ModelTiming,
    TrialReport,
)
from verifier.common.devlock import device_lock
from verifier.common.inputs import (
    as_list,
    cpu_model,
    digest,
    draw_inputs,
    init_inputs,
    nbytes,
    same_values,
    seed_everything,
    tensors_of,
    to_device,
)


def _apply_limits(job: Job) -> dict:
    info = {}
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if job.backend == "cpu" and job.memory_limit_gb:
        lim = int(job.memory_limit_gb * 2**30)
        try:
            resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
            info["address_space_gb"] = job.memory_limit_gb
        except (ValueError, OSError) as e:
            info["address_space_gb"] = f"not set: {e}"
    try:
        info.update(json.loads(os.environ.get(childenv.SANDBOX_NOTE) or "{}"))  # verifier/common/sandbox.py status()
    except ValueError:
        pass
    if os.environ.get(childenv.SANDBOXED):  # inside bubblewrap: the namespaces are already private
        info["network"] = "isolated (sandbox)"
        return info
    info["isolation"] = info.get("isolation", "none")
    try:  # a private network namespace: no network at all (needs root or user namespaces)
        libc = ctypes.CDLL(None, use_errno=True)
        info["network"] = "isolated" if libc.unshare(0x40000000) == 0 else "not isolated (unshare refused)"
    except Exception as e:  # noqa: BLE001
        info["network"] = f"not isolated ({e})"
    return info


def _short_traceback(limit: int = 2500) -> str:
    """The candidate-side frames and the exception, not the verifier's own frames, within ``limit`` characters.
    A long message keeps its head and its end: pybind11's "incompatible function arguments" error appends the
    repr of every tensor it was given ("Invoked with: tensor([[...]])"), and its last 2,500 characters were
    tensor values with the error's name and the supported signatures cut away."""
    etype, exc, tb = sys.exc_info()
    frames = [f for f in traceback.extract_tb(tb) if "site-packages/torch" not in f.filename
              and "verifier/" not in f.filename]
    where = "".join(traceback.format_list(frames[-3:]))[-(limit // 3):]
    what = "".join(traceback.format_exception_only(etype, exc))
    room = limit - len(where)
    if len(what) > room:
        keep_end = room // 4
        cut = f"\n... [{len(what) - room} characters cut] ...\n"
        what = what[:room - keep_end - len(cut)] + cut + what[-keep_end:]
    return where + what


def _same_draw(mine: torch.Tensor, ref: torch.Tensor) -> bool:
    """Whether a parameter of the candidate holds the same values as the reference's, in any order."""
    if mine.dtype != ref.dtype or mine.numel() != ref.numel():
        return False
    a, b = mine.detach().reshape(-1), ref.detach().reshape(-1).to(mine.device)
    try:
        return bool(torch.equal(torch.sort(a).values, torch.sort(b).values))
    except RuntimeError:  # a dtype sort does not take (complex, bool): compared in place
        return bool(torch.equal(a, b))


def _output_problem(out, device: str) -> str:
    """Why an output is not a plain dense tensor with real storage on the task's device ("" if it is). A tensor
    whose negative or conjugate bit is set, or a zero tensor, holds its values only once something computes them
    (the copy that reads it negates): a lazy output."""
    for t in as_list(out):  # the outputs as the judge reads them: nested tuples flattened
        if type(t) is not torch.Tensor:
            return f"output is a {type(t).__module__}.{type(t).__name__}, not a plain torch.Tensor"
        if t.layout != torch.strided or t.is_meta:
            return f"output has layout {t.layout} / meta={t.is_meta}, not a dense strided tensor"
        if t.is_neg() or t.is_conj() or t._is_zerotensor():
            return ("output is a lazy view (its negative bit, conjugate bit or zero-tensor flag set): its values "
                    "exist only once a later copy computes them")
        if t.device.type != torch.device(device).type:
            return f"output is on {t.device}, expected {device}"
        try:
            t.untyped_storage().data_ptr()
        except Exception as e:  # noqa: BLE001
            return f"output has no real storage ({e})"
    return ""


def _save(obj, path: Path) -> str:
    torch.save(obj, path)
    return path.name


class Guard:
    """Compares torch's state with the snapshot taken before the candidate was imported; the first change
    is written to flags.json at once (it survives a later hang or crash) and stops the job."""

    def __init__(self, job_dir: Path, report: ChildReport, watch: dict | None = None):
        self.job_dir, self.report = job_dir, report
        self.snapshot = Snapshot.take(watch)
        self.registry: Registry | None = None  # the dispatcher's registrations (oplib.py), once read
        self.registrations = True  # whether the next check reads them too (the caller's choice, for one check)

    def tampered(self, phase: str) -> bool:
        read, self.registrations = self.registrations, True
        if phase in ("import", "ModelNew()"):  # thread counts set at load: put back to the slot's, not a cheat
            self.report.events += [f"PyTorch's thread count set by your code was put back to this slot's ({c}, after "
                                   f"{phase})" for c in self.snapshot.restore_threads()]
        changes = self.snapshot.changes() + [f"the dispatcher: {c}" for c in (
            self.registry.changes() if self.registry is not None and read else [])]
        if not changes:
            return False
        self.report.patched += [f"{c} (after {phase})" for c in changes]
        self.report.aborted = f"torch or verifier state changed after {phase}"
        (self.job_dir / FLAGS_FILE).write_text(json.dumps({"patched": self.report.patched}))
        return True


class _BuildsAside:
    """The channel as an extension built at run time asks for it (verifier/child/loading.py): the device lock's shared
    hold let go for the build's length (host work in the verifier's process, seconds to minutes: a timer waiting
    for it waited its whole bounded wait and then timed beside this process's work)."""

    def __init__(self, ch: Channel, lock, budget_s: float):
        self.ch, self.lock, self.budget_s = ch, lock, budget_s

    def build(self, spec: dict) -> dict:
        with self.lock.aside(self.budget_s):
            return self.ch.build(spec)


def name_process(job: Job) -> None:
    """The process's name (``comm``: what ps, top and bench/lib/proc_cpu.py show) after its job: ``km-reference`` or
    ``km-candidate`` instead of the fork server's ``python``. A knockout run is named as any candidate's (the
    candidate must not tell it apart). Best effort (Linux)."""
    try:
        ctypes.CDLL(None).prctl(15, f"km-{job.kind}"[:15].encode(), 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def run_job(job_dir: Path) -> ChildReport:
    job = Job.read(job_dir)
    name_process(job)
    report = ChildReport(kind=job.kind)
    try:
        report.sandbox = _apply_limits(job)
        backend = get_backend(job.backend)
        backend.hide_launch_us = job.hide_launch_us
        report.device = backend.describe()
    except Exception:  # noqa: BLE001 - nothing of the candidate has run: the verifier's problem
        report.setup_error = traceback.format_exc(limit=4)[-3000:]
        return report
    if job.kind == "reference":
        return run_reference(job, job_dir, report, backend)
    return _run_candidate(job, job_dir, report, backend)


def _run_candidate(job: Job, job_dir: Path, report: ChildReport, backend) -> ChildReport:
    """The candidate's trials, runtime checks and timing. Seeds arrive over the channel one step at a time
    (verifier/execute/channel.py): none exists here while the candidate is imported and constructed, and trial i + 1's
    only after trial i delivered its output. Every forward call, timed ones included, runs under both op
    monitors; the timed iterations cannot tell themselves apart from the checked ones."""
    clock = PhaseClock(report)
    device = backend.device
    cuda_kernels: list[str] = []
    # a knockout run (verifier/judge/knockout.py): the candidate's own launches (cuda) or calls (cpu) are skipped;
    # read before its import
    knockout = ChildKnockout.from_job_dir(job_dir)
    calls = knockout is not None and knockout.calls
    registry: list = []  # the dispatcher's registrations, read right before the candidate is imported (oplib.py)
    channel: list = []  # the channel, once it exists: extensions built at run time are asked for over it
    cpp_extension.load_inline = make_prebuilt_load_inline(
        job.build_root, job.allow_child_compile, cuda_kernels,
        knockout.skip_launches_of if knockout is not None and not calls else None, knockout.knock_call if calls else None,
        registry, channel)
    torch.utils.cpp_extension.load_inline = cpp_extension.load_inline
    # shared while this process works on the device (cuda only: see verifier/execute/locks.py shared_lock),
    # exclusive while it times
    lock = device_lock(job.timing_lock or None)
    try:
        ref = exec_module("km_reference", job.reference_code, "reference.py")
        # constructed on the cpu before the hold is asked for (the weights' draws are host work, seconds for a large
        # network): only the copy to the device is device work
        model, init = cpu_model(ref, job.init_seed, job.reference_code, job.eval_mode)
        ref_draws = torch.random.get_rng_state()  # where the reference's construction left the generator
        clock.phase("load_reference")
        if job.backend == "cuda":
            lock.acquire(False, job.lock_wait_s)
            clock.phase("shared_lock_wait")
        model, init = model.to(device), to_device(init, device)
        clock.part("load_reference")
        # host work only (no hold on the device meanwhile: a timer does not wait for it)
        with lock.aside(job.lock_wait_s):
            with profiled(backend):  # the profiler's own threads and state exist before any baseline
                pass
            # the intra-op pool too, on both backends: a pool torch makes lazily (a CPU tensor op in __init__ on a
            # 64-core cuda host started 63 threads) is not the candidate's thread
            torch.ones(1 << 20).sum()
        clock.phase("load_profiler")
        ch = Channel(job_dir)
        channel.append(_BuildsAside(ch, lock, job.lock_wait_s))
        guard = Guard(job_dir, report, {"timing backend": backend, "channel": ch})
        registry.append(Registry([job.build_root, str(job_dir)]))
        guard.registry = registry[0]
        clock.phase("load_guard")
    except Exception:  # noqa: BLE001 - nothing of the candidate has run yet
        report.setup_error = traceback.format_exc(limit=4)[-3000:]
        return report
    # where forward's CPU time goes (cpu): loaded and its timer started before the candidate's code runs; it records
    # only inside a watched call
    sampler = Sampler(job.cpu_sampler)
    sampler.start()
    if sampler.error:
        report.events.append(sampler.error)
    tids0 = thread_ids()  # the verifier's own threads: any other is the candidate's (C09 judges what they do)
    (job_dir / JOB_FILE).unlink(missing_ok=True)
    try:
        cand = exec_module("km_candidate", job.candidate_code, "candidate.py")
    except Exception:  # noqa: BLE001
        report.import_error = traceback.format_exc(limit=4)[-3000:]
        return report
    clock.phase("load_candidate_import")
    lock.yield_to_timer(job.lock_wait_s)
    if guard.tampered("import"):
        return report
    try:
        init_c = init_inputs(ref, job.init_seed, device, job.reference_code)
        seed_everything(job.init_seed)
        with giving_way(lock, backend, job.lock_wait_s):
            model_new = cand.ModelNew(*init_c)
            same_draws = torch.equal(torch.random.get_rng_state(), ref_draws)
            model_new = model_new.to(device)
        if job.eval_mode:
            model_new.eval()
    except Exception:  # noqa: BLE001
        report.init_error = traceback.format_exc(limit=4)[-3000:]
        return report
    sd_ref, sd_new = model.state_dict(), model_new.state_dict()
    # A construction that drew from the seeded generator exactly what the reference's did (the generator left where
    # the reference's left it) holds the reference's draws, whatever it then made of them (a weight stored
    # transposed, a constant scale folded in): its parameters are its own, as under KernelBench's seeded construction.
    # Copied over, those honest kernels were wrong on every element. Another construction gets the reference's values
    # where the names and shapes agree, but for a parameter that holds exactly the reference's values rearranged.
    if (not same_draws and sd_ref and list(sd_ref) == list(sd_new)
            and all(sd_ref[k].shape == sd_new[k].shape for k in sd_ref)):
        model_new.load_state_dict({k: sd_new[k] if _same_draw(sd_new[k], v) else v for k, v in sd_ref.items()})
        report.copied_parameters = True
    ref_cls = ref.Model
    report.holds_reference_model = any(isinstance(m, ref_cls) for m in model_new.modules())
    report.cuda_kernel_names = cuda_kernels
    # threads the candidate's import or constructor started and left running (parked ones are not): work there is
    # seen by no thread-local monitor (dispatch modes, the profiler's callbacks)
    report.threads_at_load = side_work_threads(threads_beside(tids0), tids0, ended_counts=False)
    clock.phase("load")
    if guard.tampered("ModelNew()"):
        return report
    del init, init_c

    # ---- correctness trials (the reference order alternates; its outputs here are C06 bait and C11 evidence)
    sampler.take()  # what the import and ModelNew() did (a compiler's version asked) is no trial's
    draw = drawer(ref, device, job.reference_code)
    n = job.n_trials
    for i in range(n):
        clock.part("trial_misc")
        rec = TrialReport(index=i, started_s=round(time.perf_counter() - clock.start, 4))
        report.trials.append(rec)
        # the seed is the verifier's to hand out, after it sealed the last trial's output (a digest of its file) and,
        # for a task whose inputs travel as files, drew this trial's on the device (engine.py ship_inputs, its own
        # hold): this process's hold is let go meanwhile and taken back behind any waiting timer (the trial's point
        # of giving way). Held, a timer waited for the verifier's work through it: 1-5 s a trial with large outputs
        # on one H200, the timers' longest waits of the real batch (bench/lib/lock_trace.py)
        with lock.aside(job.lock_wait_s):
            seed = ch.trial_seed(i)
            clock.part("trial_seed")
        clock.part("trial_yield")
        if job.input_files:
            inputs = to_device(torch.load(job_dir / f"trial_{i}.pt", weights_only=True)["inputs"], device)
        else:
            other = job.other_shape_at(i)
            inputs = draw_inputs(ref.get_inputs, seed, device, job.reference_code, other)
        del seed
        pristine = clone(inputs)
        clock.part("trial_inputs")
        # the reference runs before the candidate on odd trials (its freed result is C06 bait), after it on the
        # even ones, and never on the extra shape's: that trial alone decides C14, and an answer computed here is one
        # the candidate's native code could keep hold of (an observer, an allocator hook) and hand back. Only a
        # digest of it is kept, never a file: the job directory is the candidate's to write, and an answer left
        # there could be copied over its own output (the outputs are sealed by the verifier as their records
        # arrive: verifier/execute/channel.py). A regular trial's stolen answer buys nothing: the even trials must
        # be right by the candidate's own work.
        other_trial = bool(job.other_shape_at(i))
        ref_first = i % 2 == 1 and not other_trial
        with torch.no_grad():
            if ref_first:  # freed memory the reference just wrote is C06 bait; only its digest is kept (C15)
                try:
                    rec.ref_digest = digest(as_list(model(*clone(inputs))))
                except Exception:  # noqa: BLE001 - the reference's failure is not the candidate's
                    report.reference_error = _short_traceback()
                    return report
            backend.synchronize()
            clock.part("trial_reference")
            # a point of giving way between the trial's inputs and reference (its device work finished: the sync
            # above) and the candidate's forward: held through both, the trial was the section timers drained
            # behind longest in one H200's real batch (7ba3cb6: 11.8 s over 22 waits, 0.54 s each)
            lock.yield_to_timer(job.lock_wait_s)
            clock.part("trial_yield")
            backend.poison_free_memory(nbytes(inputs) * 2)
            KERNEL_CALLS[0] = 0
            recorder = DispatchRecorder(sampler)
            clock.part("trial_poison")
            try:
                with profiled(backend) as prof:
                    clock.part("trial_profiler_start")
                    with recorder:
                        with record_function("km_forward"):
                            sampler.on()
                            try:
                                out = model_new(*inputs)
                            finally:
                                sampler.off()
                        if _get_current_dispatch_mode() is not recorder:
                            rec.monitor_problems.append("the dispatch monitor was removed during forward")
                    backend.synchronize()
                    clock.part("trial_forward")
            except Exception:  # noqa: BLE001
                rec.error = _short_traceback()
                ch.record(f"trial{i}", rec.to_dict())
                break
            clock.part("trial_profiler_stop")
            # the candidate's threads as forward returned, read once the profiler's session is over (a thread of
            # the profiler's own that lives for one session is not the candidate's)
            returned = threads_beside(tids0)
            with lock.aside(job.lock_wait_s):  # host work: the profile's events read
                own_in_profile = read_profile(prof, cuda_kernels, rec, registry[0])
                clock.part("trial_read_profile")
            clock.part("trial_yield")
            # a call of one of its own operators (torch.ops.<its namespace>) is a call of its extension
            rec.kernel_calls = KERNEL_CALLS[0] + max(registry[0].calls(recorder.ops), own_in_profile)
            rec.dispatched_ops = recorder.compute_ops(registry[0])
            rec.to_host_bytes = recorder.to_host_bytes
            rec.cpu_samples = sampler.take()
            if not sampler.intact():
                rec.monitor_problems.append("the cpu sampler was switched off")
            rec.mutated_inputs = [j for j, (a, b) in enumerate(zip(tensors_of(inputs), tensors_of(pristine)))
                                  if not same_values(a, b)]
            rec.output_problem = _output_problem(out, device)
            host_out = None if rec.output_problem else plain_cpu(out)
            del out
            clock.part("trial_output")
            # host work with the hold let go, taken back behind any waiting timer (the trial's second piece of device
            # work follows): the candidate's threads watched after the output was read, as the harness reads a timed
            # call's (a thread still at work is side work; up to SETTLE_S of watching), then the output's file
            # written (seconds for a large output). Held, the two were the section timers drained behind longest on
            # one H200's real batch (cc08980: 14.1 s over 25 waits)
            with lock.aside(job.lock_wait_s):
                rec.threads_added = side_work_threads(returned, tids0)
                clock.part("trial_threads")
                if host_out is not None:
                    rec.output_file = _save(host_out, job_dir / f"out_{i}.pt")
                del host_out
                clock.part("trial_output_file")
            clock.part("trial_yield")
            if not ref_first and not other_trial:
                try:
                    rec.ref_digest = digest(as_list(model(*clone(pristine))))
                except Exception:  # noqa: BLE001
                    report.reference_error = _short_traceback()
                    return report
            del inputs, pristine
        clock.part("trial_reference")
        # kept by the verifier as sent (later edits here change nothing), and its output file sealed on arrival
        ch.record(f"trial{i}", rec.to_dict())
        clock.part("trial_record")
        # the dispatcher's registrations (50 ms to read) after the first and the last trial: what registers does so
        # as the extension loads, or the first time its code runs
        guard.registrations = i in (0, n - 1)
        if guard.tampered(f"trial {i + 1}"):
            return report
    clock.phase("trials")
    if knockout:
        knockout.write_result(job_dir)
    ok_trials = len(report.trials) == n and all(not t.error and not t.output_problem for t in report.trials)
    ran = [t.own_kernel_us for t in report.trials if not t.error]
    report.own_kernel_ran = (any(us > 0 for us in ran) if ran else None) if (cuda_kernels and
                                                                              backend.name == "cuda") else None
    if ok_trials and job.n_timing:
        # the verifier answers once it has sealed the last trial's output (a digest of its file, seconds for a large
        # one): host work of the verifier's, so this process's hold is let go meanwhile, as for a trial's seed (held,
        # it was the drain timers waited on longest after a construction in one H200's real batch, 1.8 s a wait)
        with lock.aside(job.lock_wait_s):
            seeds = ch.timing_seeds()
        timed = report.timed = TrialReport(index=-1)
        recorder = DispatchRecorder()
        KERNEL_CALLS[0] = 0
        fn = watched(model_new, recorder, sampler)
        sampler.take()

        host_waits = False
        with torch.no_grad():
            try:
                if job.backend == "cuda":
                    # this process's own warm-up calls run before the exclusive lock is asked for, as trials do
                    # (shared, giving way between them): the device is held alone only for what the harness times
                    give_way = lambda: lock.yield_to_timer(job.lock_wait_s)  # noqa: E731
                    give_way()
                    host_s = warm_up(backend, fn, draw, seeds, job.warmup, give_way)
                    # whether the forward waits on the host for the device (its bracket's calls cannot be queued
                    # before the harness's gate opens): the harness is told, and opens the gate of such a model's
                    # brackets without waiting seconds for calls that never come (a hint it checks: an answer
                    # queued in time takes it back; a false one only makes the model's own brackets late)
                    host_waits = forward_waits_on_host(backend, fn, draw, seeds, give_way, host_s)
            except Exception:  # noqa: BLE001
                report.timing_error = traceback.format_exc(limit=3)[-2500:]
        clock.phase("warmup")
        if not report.timing_error:
            # one timing phase at a time per device, and no other process's device work meanwhile
            report.timing_exclusive = lock.acquire(True, job.lock_wait_s)
            report.lock_wait_s = round(lock.waited_s, 4)
            if not report.timing_exclusive:
                report.events.append(f"timing ran without the device to itself: the lock was not free within "
                                     f"{job.lock_wait_s:.0f} s")
        clock.phase("timing_lock_wait")
        # held alone to be timed: this process's waits spin, as CUDA's default (verifier/common/hostwait.py), until
        # the lock is let go
        spin = contextlib.ExitStack()
        spin.enter_context(hostwait.held_alone(job.backend))
        with torch.no_grad():
            try:
                if report.timing_error:
                    raise RuntimeError("the warm-up failed")
                if job.backend != "cuda":  # on cpu right before the timing (the cores' caches), the lock held
                    warm_up(backend, fn, draw, seeds, job.warmup)
                backend.warm_device(job.warm_device_ms)
                clock.part("timing_warm_device")
                # every timed call is clocked by the harness in the verifier's process and watched here by both
                # monitors, as a trial is (verifier/execute/harness.py: the inputs, outputs, clock and picks live there)
                clocked = BracketClient(ch, job.backend, lambda: draw(seeds[0]))
                # the profiler watches every timed call as it watches a trial: on cuda its device view, on cpu the
                # aten ops of every thread. A timed call can be told from a trial (its inputs are views into the
                # harness's pool), so a thread-local monitor alone would let native code run PyTorch compute on
                # a thread of its own on the timed calls only (docs/ANTI_CHEAT.md class 39). On cpu the profiler costs
                # a few microseconds per recorded op (an allocation, a view): the candidate's, not the reference's
                # cpu: each bracket's samples apart (the judge reads those of the brackets that set the time)
                took = lambda seq: timed.cpu_brackets.append({"seq": seq, **sampler.take()})  # noqa: E731
                with profiled(backend) as prof:
                    clock.part("timing_profiler_start")
                    brackets(clocked, "candidate", fn, job.n_brackets, host_waits,
                             after=took if sampler.started else None)
                    clock.part("timing_brackets")
                backend.synchronize()
                clock.part("timing_profiler_stop")
                n = probe_count(backend, model_new, draw, seeds, job.gap_probes)
                report.candidate = ModelTiming()
                report.candidate.launch_us, report.candidate.idle_gap_us = probe_calls(backend, model_new, seeds,
                                                                                      draw, n)
                clock.part("timing_probes")
                # the device's part is over: reading the profile (host work, a second or more for thousands of
                # timed calls) holds nobody's timing back
                lock.release()
                spin.close()
                own_in_profile = read_profile(prof, cuda_kernels, timed, registry[0])
                clock.part("timing_read_profile")
                timed.kernel_calls = KERNEL_CALLS[0] + max(registry[0].calls(recorder.ops), own_in_profile)
                timed.dispatched_ops = recorder.compute_ops(registry[0])
                timed.to_host_bytes = recorder.to_host_bytes
                timed.cpu_samples = merge([{k: v for k, v in b.items() if k != "seq"} for b in timed.cpu_brackets]
                                          + [sampler.take()])
                if not sampler.intact():
                    timed.monitor_problems.append("the cpu sampler was switched off")
                if recorder.removed:
                    timed.monitor_problems.append("the dispatch monitor was removed during a timed forward")
                ch.record("timed", timed.to_dict())
                clock.part("timing_record")
            except Exception:  # noqa: BLE001
                report.timing_error = report.timing_error or traceback.format_exc(limit=3)[-2500:]
            finally:
                spin.close()
        # the candidate's threads as the last timed call (or probe) returned, judged as after a trial
        report.threads_added_timing = side_work_threads(threads_beside(tids0), tids0)
        clock.phase("timing")
        guard.tampered("timing")
    sampler.stop()
    lock.close()
    return report


def main(job_dir: str) -> int:
    began = time.monotonic()
    job_dir_p = Path(job_dir)
    report = run_job(job_dir_p)
    report.mono_span = [round(began, 6), round(time.monotonic(), 6)]
    # written last, atomically: a crash before this point leaves no report, which the parent reports
    report.write(job_dir_p)
    return 0


if __name__ == "__main__":
    # --serve PROCS_MAX: a fork server (verifier/child/forkserver.py; [verify] sandbox_procs bounds a sandboxed job's
    # processes) whose forked children run main; else one job
    if sys.argv[1] == "--serve":
        from verifier.child.forkserver import (
            serve,  # here: a one-job process does not import the server
        )

        code = serve(int(sys.argv[2]), main)
        # the server's pipe closed: nothing of its own to finish (its children are their own processes), so it ends
        # without the interpreter's teardown of torch and the preloaded compiler stack (~2 s a server, at every exit)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(main(sys.argv[1]))
