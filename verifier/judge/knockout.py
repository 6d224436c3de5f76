"""The knockout run: do the candidate's own kernels produce part of forward's output? (the partial policy)

The partial legality policy (KernelBench's rule) allows PyTorch compute beside the candidate's own kernels, which
must do real work. A share of device time cannot say that: an empty kernel beside ``at::matmul`` takes a few
percent of a short forward, and so does ``c *= 1.0f`` after ``torch::mm``. What can: run the candidate once more
with every kernel launch of its own extensions skipped. If the output is still correct, its kernels produce no
part of it.

How: one extra correctness trial, in its own execution child, only for a correct candidate whose forward ran
PyTorch compute (the one case where the partial policy's answer is not simply the verdict's), and on cpu for one whose
forward made tensor data with allowed copies beside its own calls and no compute (``ops.MOVES_DATA``: whose data the
output is decides C02 under both policies; there the own calls' Python integers and booleans are handed back as
they were, ``keep_scalars``):
- the verifier compiles ``knockout_shim.c`` once per build root and compiler (``shim_library``) and writes
  ``knockout.json`` (the shim's path) into the job directory;
- the child (verifier/child/worker.py, with verifier/child/knockout.py ``ChildKnockout``) reads and deletes that
  file before the candidate is imported, loads the shim, and right after each of the candidate's extensions is
  loaded rewrites that library's relocation slots for the CUDA launch entry points (runtime and driver API,
  cooperative, Ex, graphs, and the entry-point getters) so that its launches are counted and return success
  without running; the counts go to ``knockout_result.json``. A launch PyTorch makes (cuBLAS under
  ``at::matmul``) goes through PyTorch's own libraries' slots and runs;
- ``run_knockout`` compares that trial's output with the reference within the normal tolerance.

Outcomes (``KnockoutResult.outcome``, recorded in ``Verdict.versions["knockout"]``): ``contributes`` (the output is
wrong, or forward raised, crashed or hung: the skipped kernels matter), ``no_contribution`` (still correct with
launches skipped and no kernel of the candidate's seen running by the profiler), ``inconclusive`` (still correct,
but some own kernel still ran: a launch route the shim does not rewrite, such as a statically linked runtime; or
nothing was skipped; or the verifier's side failed, in a second run too: ``KNOCKOUT_ATTEMPTS``; the failure's
last line is in the detail). An inconclusive knockout never rejects: the share rule
decides as before, and the verdict's notes say so; but where the verifier's side failed and the partial policy is the
run's, the verdict is ``verifier_error`` (the run that decides it did not happen: a pass on the share rule would be
the verifier's failure deciding for the candidate).

Not covered, and said plainly: a candidate that detects the knockout run (the shim is mapped in its process, its
own relocation slots hold other addresses) can return a wrong output there and pass; the knockout measures
whether the kernels are needed, not how much they do, so a kernel whose only effect is a flag the host checks
counts as contributing.

On cpu there is no launch to skip: the knockout run knocks out the calls of the candidate's own extension
functions instead (verifier/child/knockout.py ``knock_call``): each runs on copies of its arguments, so that a
write into an output argument reaches only the copy, and its result comes back as a call that did no work would
hand it back: a copy of its argument of the same shape (its input passed through), else zeros. Still correct
then: no part of the output is the candidate's own work (``no_contribution``); no call intercepted: inconclusive.
(A result of NaN, the rule before, let a pass-through ``y * 1`` or ``y + f(y)[0] * 0`` beside ``torch.matmul``
"contribute": every NaN reached the output.) An empty kernel called for show beside PyTorch
doing the work passed the partial policy on cpu before (the policy's rule there was only that own functions are
called on every trial).

Imports: the standard library, and torch with the verifier's judging modules inside ``run_knockout`` only.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from verifier.child.knockout import MARKER_FILE, RESULT_FILE
from verifier.common.cc import NoCompiler, build_once

SHIM_SOURCE = Path(__file__).parents[1] / "child" / "knockout_shim.c"
SHIM_DIR = ".knockout"  # under the build root (read-only to the execution child, which only loads it)

CONTRIBUTES, NO_CONTRIBUTION, INCONCLUSIVE = "contributes", "no_contribution", "inconclusive"
KNOCKOUT_ATTEMPTS = 2  # a knockout run that failed on the verifier's side is made once more before it is inconclusive
# ... after this pause: what failed on the verifier's side under load (a child's set-up beside nine other verifiers on
# one GPU, dbb69df) is often the moment's, and a retry at once meets the same moment
KNOCKOUT_RETRY_S = 3.0


class KnockoutError(RuntimeError):
    """The knockout shim could not be built (no C compiler, a compiler error): the knockout is inconclusive."""


def shim_library(build_root: Path) -> Path:
    """The compiled shim, built once per source, compiler and machine under ``<build_root>/.knockout/``
    (``cc.build_once``). Raises KnockoutError with the compiler's output."""
    try:
        return build_once(SHIM_SOURCE, Path(build_root) / SHIM_DIR, "km_knockout", ("-ldl",))
    except NoCompiler as e:
        raise KnockoutError(f"{e} to build the knockout shim") from None
    except RuntimeError as e:
        raise KnockoutError(f"building the knockout shim failed {e}") from None


@dataclass
class ShimReport:
    """``knockout_result.json`` as the verifier reads it (written in the candidate's process: evidence)."""

    libraries: list = field(default_factory=list)
    patched: int = 0
    skipped: dict = field(default_factory=dict)
    redirected: int = 0
    errors: list = field(default_factory=list)

    @classmethod
    def read(cls, job_dir: Path) -> "ShimReport | None":
        try:
            d = json.loads((Path(job_dir) / RESULT_FILE).read_text())
            return cls(libraries=[str(x) for x in d["libraries"]], patched=int(d["patched"]),
                       skipped={str(k): int(v) for k, v in dict(d["skipped"]).items()},
                       redirected=int(d["redirected"]), errors=[str(x) for x in d["errors"]])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None


# ---------------------------------------------------------------------------- the verifier's side


@dataclass
class KnockoutResult:
    """What the knockout run says about the candidate's own kernels (recorded in ``Verdict.versions["knockout"]``).
    ``detail`` is a sentence for the feedback: what was seen."""

    outcome: str  # contributes | no_contribution | inconclusive
    detail: str
    skipped: dict = field(default_factory=dict)  # launch entry point -> launches skipped
    patched_slots: int = 0
    own_kernel_us: float = 0.0  # device time of the candidate's kernels the profiler still saw in the knockout run
    verifier_failure: bool = False  # inconclusive because the verifier's side failed (a second run is made once)
    attempts: int = 1  # knockout runs made

    @property
    def conclusive(self) -> bool:
        return self.outcome != INCONCLUSIVE

    def to_dict(self) -> dict:
        return asdict(self)


def run_knockout(w, plan, cfg, build_root: Path, *, make_job, job_dir_of, run_driven,
                 backend: str = "cuda", keep_scalars: bool = False) -> KnockoutResult:
    """One correctness trial of the candidate of ``w`` (judge.Work) on the task of ``plan`` (api.TaskPlan) with its
    own launches skipped (cuda) or its own functions' calls knocked out (cpu), in its own execution child on
    ``backend``, judged here. Called from judge._legality_outcome
    in the verifier's device work (verifier/execute/locks.py device_work), after every file of the candidate's main
    job was read: the slot's job root is emptied first (unless ``keep_jobs``). Never raises: a failure on the
    verifier's side is an inconclusive result saying what failed. ``make_job``, ``job_dir_of`` and ``run_driven``
    are verifier/runs.py's ``new_job``, ``new_job_dir`` and ``run_driven`` (passed in: runs imports the judge).
    ``keep_scalars`` (cpu): the own calls' tensors knocked out, their Python integers and booleans handed back as they
    were (a size or a flag the candidate's function worked out, which PyTorch's copies then use: the question is whose
    tensor data the output is); a Python float is a value the call computed, knocked out as a tensor is."""
    try:
        marker = {"shim": str(shim_library(build_root))} if backend == "cuda" else \
            {"calls": True, "keep_scalars": bool(keep_scalars)}
    except (KnockoutError, OSError, subprocess.SubprocessError) as e:
        return KnockoutResult(INCONCLUSIVE, f"the knockout shim could not be built ({str(e)[:300]})")
    for attempt in range(1, KNOCKOUT_ATTEMPTS + 1):
        if attempt > 1:
            time.sleep(KNOCKOUT_RETRY_S)
        got = _knockout_once(w, plan, cfg, build_root, marker, make_job, job_dir_of, run_driven, backend)
        got.attempts = attempt
        if not got.verifier_failure:
            break
    return got


def _knockout_once(w, plan, cfg, build_root: Path, marker: dict, make_job, job_dir_of, run_driven,
                   backend: str) -> KnockoutResult:
    import torch  # here: the child imports this module for ChildKnockout only

    from verifier.execute.processes import clear_job_root

    device = "cuda" if backend == "cuda" else "cpu"
    try:
        if not cfg.keep_jobs:
            clear_job_root(cfg.host())  # the main job's directory: nothing of it is read after this
        job = make_job("candidate", backend, cfg, build_root, w.reference_code, candidate_code=w.code, n_trials=1,
                       input_files=not plan.reproducible)
        job_dir = job_dir_of(job, cfg)
        (job_dir / MARKER_FILE).write_text(json.dumps(marker))

        def ship_inputs(i: int, seed: int) -> None:  # inputs a seed does not reproduce travel as a file
            inputs = plan.draw_trial(job, i, device, seed)
            torch.save({"inputs": [x.cpu() if isinstance(x, torch.Tensor) else x for x in inputs]},
                       job_dir / f"trial_{i}.pt")

        timeout = plan.run_limit_s(cfg, job, child_compiles=cfg.allow_child_compile and not w.specs)
        run, ledger, _ = run_driven(job, job_dir, timeout, cfg, on_trial=ship_inputs if job.input_files else None)
        return _judge_knockout(job, job_dir, run, plan, cfg, device, ledger)
    except Exception as e:  # noqa: BLE001 - the verifier's failure never decides against the candidate
        return KnockoutResult(INCONCLUSIVE, f"the knockout run failed on the verifier's side ({type(e).__name__}: "
                                            f"{str(e)[:300]})", verifier_failure=True)


def _judge_knockout(job, job_dir: Path, run, plan, cfg, device: str = "cuda", ledger=None) -> KnockoutResult:
    from verifier.common.contract import ChildReport
    from verifier.judge.verdict import _warm_up_failed, memory_error

    shim = ShimReport.read(job_dir)
    seen = dict(skipped=shim.skipped, patched_slots=shim.patched) if shim else {}
    if run.timed_out or run.rc != 0 or not (job_dir / "report.json").is_file():
        if _warm_up_failed(run.log):
            return KnockoutResult(INCONCLUSIVE, "the knockout run's process failed to initialise the device",
                                  verifier_failure=True, **seen)
        how = "timed out" if run.timed_out else f"died (exit status {run.rc})"
        return KnockoutResult(CONTRIBUTES, f"with your kernels skipped the run {how}", **seen)
    try:
        report = ChildReport.read(job_dir)
    except Exception as e:  # noqa: BLE001 - written in the candidate's process
        return KnockoutResult(INCONCLUSIVE, f"the knockout run's report was unreadable ({e})", **seen)
    if report.setup_error or (report.reference_error and memory_error(_last_line(report.reference_error))):
        what = "before your program ran" if report.setup_error else "in the reference"
        return KnockoutResult(INCONCLUSIVE, f"the knockout run failed on the verifier's side ({what}: "
                                            f"{_last_line(report.setup_error or report.reference_error)})",
                              verifier_failure=True, **seen)
    if report.reference_error:  # it ran in this candidate's process on every trial of the judged run: its doing
        # (docs/ANTI_CHEAT.md class 48: the reference broken there would make the partial policy's run a verifier
        # failure, a verdict no trainer counts); the share rule decides, as where the program changed torch
        return KnockoutResult(INCONCLUSIVE, "the task's reference raised in your program's process in the knockout "
                                            f"run ({_last_line(report.reference_error)})", **seen)
    if report.patched or report.aborted:
        return KnockoutResult(INCONCLUSIVE, "your program changed torch or the verifier in the knockout run", **seen)
    if report.import_error or report.init_error:
        return KnockoutResult(CONTRIBUTES, "with your kernels skipped, importing your program or ModelNew() failed",
                              **seen)
    rec = report.trials[0] if report.trials else None
    if rec is None or rec.error or rec.output_problem or not rec.output_file:
        return KnockoutResult(CONTRIBUTES, "with your kernels skipped forward failed", **seen)
    why = ledger.unsealed(job_dir, "out_0.pt") if ledger is not None else ""
    if why:  # the output or the inputs the verifier reads, changed after they were handed over: never a pass here
        return KnockoutResult(INCONCLUSIVE, f"the knockout run's evidence was changed: {why}", **seen)
    if not _still_correct(job, job_dir, rec, plan, cfg, device, ledger):
        return KnockoutResult(CONTRIBUTES, "with your kernels skipped the output is wrong: their work is part of it",
                              own_kernel_us=rec.own_kernel_us, **seen)
    if shim is None or shim.errors:
        why = "; ".join(shim.errors)[:300] if shim else f"no {RESULT_FILE}"
        return KnockoutResult(INCONCLUSIVE, f"the knockout shim did not work ({why})", own_kernel_us=rec.own_kernel_us,
                              **seen)
    if rec.own_kernel_us > 0:
        return KnockoutResult(INCONCLUSIVE, "some of your kernels still ran with the knockout on (launched by a route "
                                            "it does not intercept)", own_kernel_us=rec.own_kernel_us, **seen)
    n = sum(shim.skipped.values())
    if n == 0:
        return KnockoutResult(INCONCLUSIVE, "the knockout intercepted none of your launches (a CUDA runtime linked "
                                            "statically, or a route it does not intercept)" if device == "cuda" else
                                            "the knockout intercepted none of your functions' calls", **seen)
    if device != "cuda":
        return KnockoutResult(NO_CONTRIBUTION, f"with every call of your own functions knocked out ({n} calls: run on "
                                               "copies, their results replaced by wrong values), forward's output was "
                                               "still correct", **seen)
    return KnockoutResult(NO_CONTRIBUTION, f"with every kernel launch of your own module skipped ({n} launches), "
                                           "forward's output was still correct", **seen)


def _last_line(text: str) -> str:
    """A traceback's last line (the exception), shortened: what the knockout's notes say of a failure."""
    from verifier.judge.execution import last_line

    return (last_line(text) or "no detail")[:240]


def _still_correct(job, job_dir: Path, rec, plan, cfg, device: str = "cuda", ledger=None) -> bool:
    """The knockout trial's output against the reference on the same inputs, within the normal tolerance (the
    checks of verifier/judge/outputs.py; what they say besides matched or not is not this run's concern)."""
    import torch

    from verifier.common.backends import get_backend
    from verifier.common.inputs import as_list
    from verifier.common.ties import reference_outputs
    from verifier.execute.channel import Unsealed
    from verifier.judge.outputs import (Evidence, check_outputs, construct_reference, load_sealed, reference64_judged,
                                        reference_models)

    # the knockout's own job uses its reference once: constructed, not kept for copies
    model, model64 = reference_models(plan, job, device, cfg, construct_reference(plan, job, cfg))
    try:
        inputs = plan.trial_inputs(job, 0, device, job_dir, ledger)
    except Unsealed:
        return True  # an input file rewritten to fit the output: no evidence that the own kernels matter
    with torch.no_grad():
        refs = reference_outputs(model, inputs, plan.selects)
    refs64, pooled = reference64_judged(model64, inputs, plan.selects, plan.pooled)
    outs = as_list(load_sealed(ledger, job_dir, "out_0.pt"))
    return check_outputs(outs, refs, refs64, inputs, None, "Knockout trial", cfg, plan.ref_mod,
                         get_backend(device).poison_byte, [], Evidence(), [], False, pooled)
