"""What the verifier learns about a task program once (``TaskPlan``, cached per program, backend and the settings it
depends on, released when no pending candidate of the task holds it): how its inputs are made, whether they are
reproducible from a seed, an extra-shape trial, whether it fits the machine, the reference's own fp32 error against
float64 (the measured tolerance) and whether the task can judge a candidate at all."""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
import threading
import types
from dataclasses import dataclass
from pathlib import Path

import torch

from kernelmill.errors import InputError
from verifier.common.backends import out_of_device_memory
from verifier.common.config import VerifyConfig
from verifier.common.contract import Job
from verifier.common.inputs import (
    as_list,
    cpu_model,
    draw_inputs,
    meta_input_bytes,
    meta_output_bytes,
    nbytes,
    same,
)
from verifier.common.shapes import SIZE_RATIOS, size_changes
from verifier.common.ties import has_selection, reference_outputs
from verifier.execute import admission
from verifier.execute.channel import Ledger
from verifier.execute.locks import device_work, give_back_cache, lock_wait_s
from verifier.judge.budgets import error_and_scale
from verifier.judge.numerics import FLOAT64_OWN, float64_model, real_view, widen
from verifier.judge.outputs import RNG_LOCK, inputs_fault, load_sealed, reference_fault, written_inputs
from verifier.judge.reduction import FOLDED_TRACKED, WIDE, NarrowFloats, ReductionTracker, RefStats


def load_reference(reference_code: str, name: str = "task"):
    """The task program as a module; InputError when it is not a runnable KernelBench program."""
    mod = types.ModuleType("km_reference_parent")
    try:
        exec(compile(reference_code, f"<{name}>", "exec", dont_inherit=True), mod.__dict__)
    except Exception as e:  # noqa: BLE001
        raise InputError(name, f"the task program does not run: {type(e).__name__}: {e}") from None
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, attr):
            raise InputError(name, f"the task program defines no {attr}")
    return mod


# ---------------------------------------------------------------------------- stages 1-3


# seconds a GiB of output takes to leave the execution child (a device-to-host copy and torch.save to the job
# directory): 1.0 s measured for the save alone on a loaded 2-core machine, doubled
TRANSFER_S_PER_GIB = 2.0


@dataclass
class TaskPlan:
    """What the verifier learned about a task program once (cached per program and backend): how its
    inputs are made, whether an extra-shape trial exists, whether it fits the machine."""

    ref_mod: types.ModuleType | None  # None only in a copy handed to another process (``plan_to_hand_over``)
    text: str
    device: str
    reproducible: bool = True  # get_inputs gives the same inputs for the same seed (else they are shipped)
    other_shape: str = ""  # the extra-shape trial's size change (verifier.common.shapes.SizeChange as JSON), "" for none
    input_bytes: int = 0
    output_bytes: int = 0  # the reference's outputs on the plan's draw
    weight_bytes: int = 0  # the reference model's parameters and buffers
    module_bytes: int = 0  # tensors the task's module keeps in its globals (the child holds them too)
    # the device memory the reference's forward holds at its peak beyond its inputs and outputs (its intermediates),
    # measured on the plan's first draw (cuda; 0 on cpu): a job's forwards hold it too (``job_bytes``)
    work_bytes: int = 0
    trial_scale: float = 1.0  # the largest trial's inputs over the benchmark's (the extra shape: up to 4)
    other_output_bytes: int = 0  # the reference's outputs on the extra shape (0: none, or not measured)
    skip_reason: str = ""  # the task does not fit this machine: every verdict is a verifier_error with this
    task_fault: str = ""  # no candidate can be judged on the reference (outputs.reference_fault, inputs_fault): task_error
    float64: str = ""  # "" when the float64 reference runs (measured tolerance), else why not (fixed tolerance)
    pooled: list = dataclasses.field(default_factory=list)  # per output: numerics.RefStats on the plan's draws
    # the reference keeps state between calls (KernelBench's VanillaRNN writes self.hidden in forward): its output
    # on the same inputs, the generators seeded alike, differs from one call to the next (``_keeps_state``)
    stateful: bool = False
    # an output is the index output of a selection (topk, sort, argmax...: verifier/common/ties.py): the reference's
    # runs that judge a candidate record what it selects from, so another index among tied values is right too
    selects: bool = False

    def job_bytes(self) -> int:
        """The bytes one execution job of this task plans to hold (verifier/execute/admission.py admits it by them)."""
        return admission.job_bytes(int(self.input_bytes * self.trial_scale), self.largest_output_bytes(),
                                   self.weight_bytes, not self.float64,
                                   int(self.work_bytes * self.trial_scale)) + self.module_bytes

    def timing_bytes(self) -> int:
        """The bytes a reference timing of this task plans to hold (runs.prepare_task admits it by them): the
        benchmark's shape, no float64 copy, no judge (``admission.timing_bytes``); never more than a candidate's
        job, which times the reference itself where no preparation did."""
        return min(self.job_bytes(), admission.timing_bytes(self.input_bytes, self.output_bytes, self.weight_bytes,
                                                            self.work_bytes, self.device) + self.module_bytes)

    def largest_output_bytes(self) -> int:
        """The outputs of the largest trial: the extra shape's as measured, else scaled with its inputs."""
        if self.other_shape and self.other_output_bytes:
            return max(self.output_bytes, self.other_output_bytes)
        return int(self.output_bytes * self.trial_scale)

    def run_limit_s(self, cfg: VerifyConfig, job: Job, child_compiles: bool = False) -> float:
        """The wall-clock limit of one execution job: ``run_timeout_s`` for the candidate's code, plus the time
        its outputs take to leave the child (copied to host memory and written for the judge, at most
        ``TRANSFER_S_PER_GIB`` a GiB), which is the verifier's plumbing, not the candidate's: a correct kernel
        for a task with a 4 GiB output (KernelBench's small-K matmul) wrote 6 trials, their references and the
        timed checks, ~80 GiB, within the candidate's 120 s and was killed as a hang. Plus the compile limit
        where the child builds the candidate itself."""
        last = self.largest_output_bytes() if job.other_shape else self.output_bytes
        trials = 2 * (max(job.n_trials - 1, 0) * self.output_bytes + last)  # each output and the reference's
        checks = job.timed_checks * (1 if job.n_timing else 0) * self.output_bytes  # timed outputs kept for C16
        out_gib = (trials + checks) / 2**30
        return cfg.run_timeout_s + TRANSFER_S_PER_GIB * out_gib + (cfg.compile_timeout_s if child_compiles else 0)

    def draw_trial(self, job: Job, i: int, device: str, seed: int | None = None) -> list:
        """The inputs of trial ``i`` of ``job`` drawn from its seed (``seed``, or the one the job's run recorded; the
        last trial is the extra shape, if any)."""
        other = job.other_shape_at(i)
        with RNG_LOCK:
            return draw_inputs(self.ref_mod.get_inputs, job.trial_seeds[i] if seed is None else seed, device,
                               self.text, other)

    def trial_inputs(self, job: Job, i: int, device: str, job_dir: Path, ledger: Ledger) -> list:
        """The inputs of trial ``i`` as the child got them: drawn again, or shipped in ``job_dir`` and read back as
        the verifier sealed them (raises ``Unsealed`` where the file was changed since)."""
        if job.input_files:
            return [x.to(device) if isinstance(x, torch.Tensor) else x for x in
                    load_sealed(ledger, job_dir, f"trial_{i}.pt", check=True)["inputs"]]
        return self.draw_trial(job, i, device)


# per task: held by its pending candidates in verify_batch; after them, kept for a later batch (an RL step, a Ray
# chunk) only while the plans nobody holds are few and their modules small (issue 35: a module's tensors stayed)
PLANS_KEPT, PLANS_KEPT_BYTES = 32, 64 << 20
_PLANS = admission.HeldCache(PLANS_KEPT, PLANS_KEPT_BYTES, size=lambda plan: admission.module_bytes(plan.ref_mod))
_PLAN_LOCK = threading.Lock()


def _plan_key(reference_code: str, backend: str, cfg: VerifyConfig) -> tuple:
    return (hashlib.sha256(reference_code.encode()).hexdigest(), backend) + plan_settings(cfg)


def _release_plan(key: tuple) -> None:
    """One pending candidate of the plan's task is done; with none left, the plan is kept within the cache's bounds
    or leaves it (with the task's module and what it holds), and then, on cuda, what it held goes back to the
    driver. A later batch plans a dropped task again."""
    if _PLANS.release(key):
        give_back_cache(key[1])


def plan_settings(cfg: VerifyConfig) -> tuple:
    """The verifier settings a TaskPlan is made from (task_plan reads no other field of ``cfg``)."""
    return (bool(cfg.other_shape), bool(cfg.float64_reference), bool(cfg.eval_mode))


def task_plan(reference_code: str, backend: str, cfg: VerifyConfig, name: str = "task") -> TaskPlan:
    """The task's plan, made once per configuration while it is cached (held by pending candidates of the task,
    else kept within ``_PLANS``'s bounds); InputError when the program does not run as a task. The settings the
    plan depends on are part of the cache key: a plan made with the extra-shape trial or the float64 reference off
    is never handed to a verification that has them on, or back. Building it is admitted by the process's memory
    gate (verifier/execute/admission.py) like an execution job."""
    return _PLANS.get_or_build(_plan_key(reference_code, backend, cfg),
                               lambda: _build_plan(reference_code, backend, cfg, name))


def plan_to_hand_over(reference_code: str, backend: str, cfg: VerifyConfig) -> TaskPlan | None:
    """This process's plan of the task where it has one, without its module (``ref_mod`` None, picklable): what the
    engine hands a slot's trusted process (verifier/workers.py) with a candidate of the task (``Work.plan``), so that
    the slot judges by the plan the task's preparation made (its extra shape, its measured tolerance) instead of
    running the reference's planning again in its own process. Made again there, it held each cuda slot 6.2 s
    (median) of a candidate's execution in one H100's real batch of one candidate per task (048b0da's
    ``execute_prepare``), and its reference runs held the device shared while timers waited. None where this
    process has no plan of the task (the slot then makes its own)."""
    plan = _PLANS.get(_plan_key(reference_code, backend, cfg))
    return None if plan is None else dataclasses.replace(plan, ref_mod=None)


def take_plan(plan: TaskPlan, backend: str, cfg: VerifyConfig, name: str = "task") -> TaskPlan:
    """A plan another of the verifier's processes made (``plan_to_hand_over``), kept as this process's plan of the
    task unless it has one already (which stays): its program is loaded here again (a module of its own, no run of
    the reference). The verifier's processes only hand plans between themselves (the trusted pipe of
    verifier/workers.py): a plan holds the extra shape a candidate must not learn."""
    return _PLANS.get_or_build(_plan_key(plan.text, backend, cfg),
                               lambda: dataclasses.replace(plan, ref_mod=load_reference(plan.text, name)))


def _build_plan(reference_code: str, backend: str, cfg: VerifyConfig, name: str) -> TaskPlan:
    device = "cuda" if backend == "cuda" else "cpu"
    ref_mod = load_reference(reference_code, name)
    plan = TaskPlan(ref_mod=ref_mod, text=reference_code, device=device)
    meta = meta_input_bytes(ref_mod.get_inputs, reference_code)
    capacity = admission.capacity_bytes(device)
    # a trial holds the inputs, a pristine copy, the candidate's and the reference's outputs (about the size
    # of the inputs each for most tasks), and the verifier draws them again to compare. Refused only when that
    # exceeds the whole device: what is free now depends on the jobs beside this one (KernelBench's Softsign,
    # 6 GiB of inputs, was skipped with 18.8 GiB free of an H100 while three other jobs ran), and the memory gate
    # below serialises a task that fits the device only alone
    if meta is not None and meta * 4 > capacity:
        plan.skip_reason = (f"skipped: the task's inputs take {meta / 2**30:.1f} GiB and a trial needs about four "
                            f"times that; {device} has {capacity / 2**30:.1f} GiB in all")
        return plan
    seed = secrets.randbelow(2**31 - 1) + 1
    # planning holds about what a job does (three draws, outputs, the float64 copies); the outputs' size from a
    # forward on meta tensors, else taken as the inputs'; unknown inputs plan nothing
    meta_out = meta_output_bytes(ref_mod, reference_code) if meta is not None else None
    planned = admission.job_bytes(meta or 0, max(meta or 0, meta_out or 0), 0, cfg.float64_reference)
    with RNG_LOCK:  # constructed on the cpu before the hold: only its copy to the device is device work
        cpu, _ = cpu_model(ref_mod, seed, reference_code, cfg.eval_mode)
    # the reference's runs here hold the device shared: on cuda, work of this process inside another's timing
    # window is counted in that candidate's time. The plan gives way between its pieces of device work (``give_way``):
    # held whole, it was one shared hold of 0.7 s median (p90 1.7 s) that a waiting timer drained behind
    # (bench/results/throughput_real_NVIDIA_H200_c80df1d.md)
    with admission.gate_for(device, cfg.memory_budget_gib).admit(planned), device_work(cfg, backend) as lock:
        free = admission.free_bytes(device)  # once admitted: what the float64 copy may take

        def give_way() -> None:
            """A point between two of the plan's pieces: the piece's device work finished first (a timer given the
            device must not find this process's kernels still running), then a waiting timer goes first. Called
            outside RNG_LOCK: a harness of this process draws its inputs under it while it clocks a candidate."""
            if backend == "cuda":
                torch.cuda.synchronize()
            lock.yield_to_timer(lock_wait_s(cfg))

        try:
            with RNG_LOCK, torch.no_grad():
                a = draw_inputs(ref_mod.get_inputs, seed, device, reference_code)
                b = draw_inputs(ref_mod.get_inputs, seed, device, reference_code)
                plan.reproducible = same(a, b)
                plan.input_bytes = nbytes(a)
                model = cpu.to(device)
                rng = _rng_state()
                before = _peak_start(device)
                try:  # recording what index outputs select (verifier/common/ties.py) under a dispatch mode
                    out = reference_outputs(model, a)
                except Exception as e:  # noqa: BLE001 - a reference the mode cannot run under: judged without the
                    if _out_of_memory(e, device):  # marks; but the device's memory is not the mode's (planned again)
                        raise
                    out = reference_outputs(model, a, track=False)
                plan.work_bytes = _peak_over(device, before, nbytes(out))
                plan.selects = has_selection(out)
                written = written_inputs(a, b) if plan.reproducible else []
                del b
                plan.output_bytes = nbytes(out)
                plan.weight_bytes = nbytes(list(model.parameters()) + list(model.buffers()))
            give_way()
            with RNG_LOCK, torch.no_grad():  # a piece of its own: the second call, the generators put back
                plan.stateful = _keeps_state(model, a, out, rng)
            give_way()
            with RNG_LOCK, torch.no_grad():
                c = draw_inputs(ref_mod.get_inputs, seed + 1, device, reference_code)
                out_c = as_list(model(*c))
            give_way()
            with RNG_LOCK, torch.no_grad():
                plan.float64, plan.pooled, outs64 = _float64_check(model, [a, c], [out, out_c], plan.input_bytes,
                                                                   free, cfg)
                plan.task_fault = reference_fault(out, out_c, same(a, c), outs64) or inputs_fault(written)
                del c, out_c, outs64
            other = cfg.other_shape and plan.input_bytes <= (1 << 30) and not plan.task_fault
            if other:
                give_way()
            with RNG_LOCK, torch.no_grad():
                if other:
                    plan.other_shape, plan.other_output_bytes = _pick_size_change(ref_mod, model, reference_code,
                                                                                  seed, device, a)
                    plan.trial_scale = _other_shape_scale(plan, seed)
                del model, out, a
                plan.module_bytes = admission.module_bytes(ref_mod)
        except Exception as e:  # noqa: BLE001
            if _out_of_memory(e, device):
                # the device's memory, held by other processes as often as by this task: not cached, and the engine
                # plans it again after its set-up waits (engine.device_memory_error)
                raise PlanOutOfMemory(name, "the verifier ran out of device memory while planning this task (its "
                                            f"inputs take {plan.input_bytes / 2**30:.1f} GiB; {str(e)[:160]})") from None
            raise InputError(name, f"the task program does not run: {type(e).__name__}: {e}") from None
    return plan


class PlanOutOfMemory(InputError):
    """The device ran out of memory while a task was planned: the verifier's failure, never the task's or the
    candidate's; run again after waits (verifier/engine.py ``SETUP_RETRY_S``), then the verifier_error it says."""


def _out_of_memory(e: BaseException, device: str) -> bool:
    """Whether the reference's run failed for the device's memory (torch's error, or a CUDA call's)."""
    return isinstance(e, torch.OutOfMemoryError) or (device == "cuda" and out_of_device_memory(e))


def _peak_start(device: str) -> int:
    """The device memory this process has allocated now, its peak counter reset there (cuda; 0 elsewhere)."""
    if device != "cuda":
        return 0
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_allocated()


def _peak_over(device: str, before: int, output_bytes: int) -> int:
    """What a forward held at its peak beyond what was allocated before it and the outputs it left (cuda; 0
    elsewhere). The counter is the process's: work of another thread in that window counts too (the estimate errs
    high, so the gate admits fewer jobs beside it, never more than fit)."""
    if device != "cuda":
        return 0
    torch.cuda.synchronize()
    return max(0, torch.cuda.max_memory_allocated() - before - output_bytes)


def _rng_state() -> tuple:
    """The generators' states (cpu, and every device's where CUDA is up), for ``_keeps_state`` to put back."""
    return torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None


def _keeps_state(model, inputs: list, out: list, rng: tuple) -> bool:
    """Whether the reference's output depends on the calls before it: called again on the same inputs, with the
    generators as they were for the first call (a random op draws alike), some output differs by more than rounding
    (1e-3 of the output's scale; a nondeterministic reduction differs in its last bits only). Such a reference
    judges the trials, where it is called in the candidate's order, but no single timed call: the harness's copy
    has been called otherwise (tests/redteam/test_redteam_value_kinds.py: an honest VanillaRNN was C16)."""
    torch.set_rng_state(rng[0])
    if rng[1] is not None:
        torch.cuda.set_rng_state_all(rng[1])
    again = as_list(model(*inputs))
    for o, p in zip(out, again):
        if not isinstance(o, torch.Tensor):
            continue
        if not isinstance(p, torch.Tensor) or p.shape != o.shape or p.dtype != o.dtype:
            return True
        if not (o.is_floating_point() or o.is_complex()):
            if not torch.equal(o, p):
                return True
            continue
        a, b = real_view(o).double(), real_view(p).double()
        fin = torch.isfinite(a) & torch.isfinite(b)
        scale = float(a[fin].abs().max()) if bool(fin.any()) else 0.0
        if bool((torch.isfinite(a) != torch.isfinite(b)).any()) or \
                bool(((a - b).abs()[fin] > 1e-3 * scale + 1e-12).any()):
            return True
    return len(out) != len(again)


def _float64_check(model, draws: list, outs: list, input_bytes: int, free: int,
                   cfg: VerifyConfig) -> tuple[str, list, list | None]:
    """("", per output (fp32 error, scale) over ``draws``, the float64 outputs per draw) when the reference runs
    in float64 here (the measured tolerance of verifier/judge/numerics.py), else (why not, [], None)."""
    if not cfg.float64_reference:
        return "off (verify.float64_reference = false)", [], None
    if not any(isinstance(o, torch.Tensor) and o.dtype in (torch.float32, torch.complex64) for o in outs[0]):
        wide = [isinstance(o, torch.Tensor) and o.dtype in WIDE for o in outs[0]]
        if any(wide):  # the task computes in float64: its outputs are the truth, judged against float64 rounding
            with NarrowFloats() as seen:
                model(*draws[0])
            if not seen.narrow:
                return FLOAT64_OWN, [RefStats(0.0, 0.0, wide=w) for w in wide], None
        return "no float32 output", [], None
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    out_bytes = nbytes(outs[0])
    held = len(draws) * (input_bytes + out_bytes) + weights  # the fp32 draws and outputs held while this runs
    need = 2 * input_bytes + 2 * len(draws) * out_bytes + 2 * weights  # widened inputs, float64 outputs and weights
    if held + need > free * 3 // 4:
        return "the float64 copy of the reference, its inputs and outputs does not fit in memory", [], None
    try:
        return _float64_outputs(model, draws, outs)
    except Exception as e:  # noqa: BLE001 - the estimate missed (another process, forward's own workspace)
        if not out_of_device_memory(e):
            raise
        give_back_cache("cuda")
        return "the float64 reference ran out of device memory", [], None


def _float64_outputs(model, draws: list, outs: list) -> tuple[str, list, list | None]:
    model64 = float64_model(model)
    pooled = [RefStats(0.0, 0.0)] * len(outs[0])
    outs64 = []
    for d, (inputs, out) in enumerate(zip(draws, outs)):
        try:
            if d == 0:  # the first draw also records each output's reduction length (the budget's floors)
                with ReductionTracker() as tracker:
                    out64 = as_list(model64(*widen(inputs)))
                pooled = [RefStats(0.0, 0.0, r.length, r.same_sign, r.scan,
                                   variance=r.spread is not None or r.folded > FOLDED_TRACKED, folded=r.folded)
                          for r in tracker.reductions(out64)]
                pooled += [RefStats(0.0, 0.0)] * (len(outs[0]) - len(pooled))
            else:
                out64 = as_list(model64(*widen(inputs)))
        except Exception as e:  # noqa: BLE001 - e.g. an op without a float64 kernel: the fixed tolerance instead
            if out_of_device_memory(e):  # (any wording of it: a driver's or a library's, not only torch's type)
                raise
            return f"the reference does not run in float64 ({type(e).__name__}: {str(e)[:120]})", [], None
        if len(out64) != len(out) or any(isinstance(o, torch.Tensor) and (not isinstance(p, torch.Tensor) or
                                                                        p.shape != o.shape) for o, p in zip(out, out64)):
            return "the float64 reference returns other outputs", [], None
        for k, (o, p) in enumerate(zip(out, out64)):
            if isinstance(o, torch.Tensor) and o.dtype in (torch.float32, torch.complex64):
                e, m = error_and_scale(real_view(o), real_view(p))  # a complex output: its parts, as it is judged
                pooled[k] = pooled[k]._replace(err=max(pooled[k].err, e), scale=max(pooled[k].scale, m))
        outs64.append(out64)
    return "", pooled, outs64


def _other_shape_scale(plan: TaskPlan, seed: int) -> float:
    """The extra-shape trial's input bytes (on meta tensors) over the benchmark's, at least 1: a job is admitted by
    its largest trial, whose outputs are taken to grow in proportion."""
    if not plan.other_shape or not plan.input_bytes:
        return 1.0
    get = plan.ref_mod.get_inputs
    other = meta_input_bytes(lambda: draw_inputs(get, seed, "meta", plan.text, plan.other_shape), plan.text) or 0
    return max(1.0, other / plan.input_bytes)


def _pick_size_change(ref_mod, model, text: str, seed: int, device: str, inputs: list) -> tuple[str, int]:
    """(a size change of the task's own constants (verifier.common.shapes.size_changes, its step drawn at random among
    SIZE_RATIOS, the others tried after it) whose inputs the reference accepts and whose shapes differ from the benchmark's, the bytes of the reference's outputs on
    it); ("", 0) when there is none. The outputs are measured, not scaled from the inputs: a matmul's inputs
    grow 1.5x where its output grows 2.25x (KernelBench's small-K matmul: 4 GiB -> 9 GiB)."""
    shapes = [tuple(x.shape) for x in inputs if isinstance(x, torch.Tensor)]
    ratios = list(SIZE_RATIOS)
    secrets.SystemRandom().shuffle(ratios)  # drawn here, in the verifier's process: never a fixed function of the sizes
    changes = [c for r in ratios for c in size_changes(text, r)]
    for change in changes:
        spec = change.to_json()
        try:
            meta = meta_input_bytes(lambda: draw_inputs(ref_mod.get_inputs, seed, "meta", text, spec), text)
            if meta is not None and meta > 4 * max(nbytes(inputs), 1 << 20):  # 1.5x on up to three dimensions
                continue
            other = draw_inputs(ref_mod.get_inputs, seed, device, text, spec)
            if [tuple(x.shape) for x in other if isinstance(x, torch.Tensor)] == shapes:
                continue
            out_bytes = nbytes(as_list(model(*other)))
        except Exception:  # noqa: BLE001 - the reference rejects this shape: try the next
            continue
        return spec, out_bytes
    return "", 0
