"""The anti-cheat catalogue and its registry: one stable code per row of docs/ANTI_CHEAT.md, each with the one
function that decides it. C01-C18 are the design catalogue's rows 1-18 in order; later codes refine one of them
(``Cheat.row``).

A code's entry below is one decorated function: ``@_code(...)`` gives its catalogue row (the pattern, how it is
caught in words, and ``fix``, the sentence a repair turn reads: what to do instead), and the function is its
**check**: given what the probes saw (``Seen``) it says whether the code fires. ``decide(seen)`` runs every check
and is the only way a verdict's codes are made (verifier/engine.py for the stages before execution,
verifier/judge/verdict.py after it).

**Probes** gather the evidence, each where it can be seen, and are registered under the codes they can sight with
``@cheats.probe(code, ..., where=...)``: ``front`` (the static scans before compiling), ``binary`` (the built
library's symbols), ``child`` (first signals recorded in the execution child and streamed), ``harness`` (the
trusted harness"s timed outputs) and ``judge`` (the verifier"s process, against reference outputs the candidate
never saw). A code is seen from several places (C01 from the Python text, the C++ sources, the built library and
two runtime monitors), but decided in one. ``registered()`` returns every check with its probes (all probes are
registered once ``verifier.engine`` is imported). tests/test_architecture.py holds the three together: every code
has exactly one check (a second registration is refused), a catalogue row naming its check and probes, and a
red-team test under tests/redteam/ that asserts it. Adding a class is one entry here, the probe that sees it and
one red-team pair.

A verdict lists every code that fired (``Verdict.cheats``); any code makes the reward the cheat
reward (verifier/judge/reward.py). Codes are stable strings: corpora and dashboards key on them.
Imports: the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

C01, C02, C03, C04, C05, C06, C07, C08, C09, C10, C11, C12, C13, C14, C15, C16, C17, C18, C19 = (
    "C01_TORCH_COMPUTE", "C02_KERNEL_NOT_LAUNCHED", "C03_FALLBACK_BRANCH", "C04_REFERENCE_MODEL",
    "C05_CONSTANT_OUTPUT", "C06_STALE_MEMORY", "C07_INPUT_MUTATION", "C08_OUTPUT_CACHING", "C09_SIDE_WORK",
    "C10_LAZY_OUTPUT", "C11_MONKEYPATCH", "C12_SEED_PREDICTION", "C13_PRECISION_LOSS", "C14_HARDCODED_SHAPE",
    "C15_READS_EXPECTED", "C16_WARMUP_DETECTION", "C17_SANDBOX_ESCAPE", "C18_FAKE_VERDICT", "C19_UNRUN_TORCH_PATH")

LEGALITY = ("strict", "partial")


@dataclass(frozen=True)
class Seen:
    """What the probes saw of one candidate, the input of every check. ``codes``: the codes a probe sighted with
    evidence that is a cheat under either legality policy; ``torch``: the codes sighted for PyTorch compute a
    runtime monitor saw run in forward (C01, and C03 where it ran on some trials only), which the partial policy
    allows beside the candidate's own kernels; ``torch_found``: the scans outside the process (the Python text,
    the built library's imports) found PyTorch compute in forward; ``partial_ok``: the partial policy's own-work
    condition where it was asked (verifier/judge/checks.py ``own_work_ok``), else None; ``legality``: the policy
    the verdict is decided under."""

    codes: frozenset = frozenset()
    torch: frozenset = frozenset()
    torch_found: bool = False
    partial_ok: bool | None = None
    legality: str = "strict"

    def __post_init__(self):
        if self.legality not in LEGALITY:
            raise ValueError(f"legality must be one of {LEGALITY}, got {self.legality!r}")
        unknown = (set(self.codes) | set(self.torch)) - set(CATALOGUE)
        if unknown:
            raise KeyError(f"codes the catalogue does not define: {sorted(unknown)}")

    def sighted(self, code: str) -> bool:
        """``code`` was sighted with evidence the policy counts: any sighting under the strict policy, PyTorch
        compute that ran not under the partial one."""
        return code in self.codes or (self.legality == "strict" and code in self.torch)


@dataclass(frozen=True)
class Cheat:
    code: str
    row: int
    pattern: str
    caught_by: str
    fix: str  # the feedback's advice for this code: what an honest candidate does instead


@dataclass(frozen=True)
class Probe:
    """One function that gathers evidence of ``code``: its dotted name and where its evidence is."""

    code: str
    function: str  # module.qualname, e.g. verifier.judge.checks.check_channel
    where: str  # one of WHERE


@dataclass(frozen=True)
class Check:
    """The one function that decides ``code`` from what the probes saw."""

    code: str
    function: str  # module.qualname, e.g. verifier.cheats.constant_output
    decide: Callable[[Seen], bool]


WHERE = ("front", "binary", "child", "harness", "judge")
CATALOGUE: dict[str, Cheat] = {}
CHECKS: dict[str, Check] = {}
PROBES: dict[str, list[Probe]] = {}


def _code(code: str, *, row: int, pattern: str, caught_by: str, fix: str):
    """Enter ``code`` in the catalogue with the decorated function as its one check. Refuses a second check."""
    def enter(fn: Callable[[Seen], bool]):
        if code in CHECKS:
            raise ValueError(f"{code} already has its check ({CHECKS[code].function}); a code is decided in one place")
        CATALOGUE[code] = Cheat(code, row, pattern, caught_by, fix)
        CHECKS[code] = Check(code, f"{fn.__module__}.{fn.__qualname__}", fn)
        PROBES[code] = []
        return fn
    return enter


# ------------------------------------------------------------------------------------------- the codes
# C01-C18 are rows 1-18 of the design catalogue; C19 refines row 1 where a verdict must tell apart two readings of
# one row that corpora and policies treat differently.

@_code(C01, row=1,
       pattern="PyTorch/ATen/cuBLAS compute in ModelNew (torch.matmul, F.*, @, x.relu(), an nn layer's "
               "forward, torch.compile, at:: compute called from the C++)",
       caught_by="static: torch/F calls outside the allocation-and-view allowlist, tensor compute methods, "
                 "`@`, calls of nn submodules; runtime: every aten op dispatched during forward (Python and "
                 "C++) checked against the allowlist",
       fix="compute forward's result in your own kernels; use PyTorch only to allocate (torch.empty) and "
           "reshape (view, contiguous)")
def torch_compute(seen: Seen) -> bool:
    """C01: a probe sighted compute no policy allows (vendor calls, host copies, a foreign share on cuda), or,
    under the strict policy, a runtime monitor saw PyTorch compute run in forward."""
    return seen.sighted(C01) or (seen.legality == "strict" and seen.torch_found and bool(seen.torch))


@_code(C02, row=2,
       pattern="a kernel is compiled but never launched",
       caught_by="static: no exported kernel function is referenced by the program (by name, or by a string in "
                 "getattr; a name computed at run time is left to the runtime count); runtime: the extension's "
                 "functions are wrapped and counted on every forward, and on cuda the profiler must show one "
                 "of the candidate's __global__ kernels",
       fix="call your extension's function from ModelNew.forward and launch its kernel there")
def kernel_not_launched(seen: Seen) -> bool:
    """C02: a probe sighted no own kernel called or run, or, under the partial policy, the own kernels did not
    do part of the work (``seen.partial_ok`` False: the knockout or the share rule)."""
    return seen.sighted(C02) or (seen.legality == "partial" and seen.partial_ok is False)


@_code(C03, row=3,
       pattern="try: custom() except: reference() fallback, or a reference path on some inputs",
       caught_by="static: try/except inside ModelNew whose handler does more than re-raise; runtime dispatch "
                 "check on every trial, including the extra shape",
       fix="remove the path to PyTorch: handle every input the task can produce in your own kernel")
def fallback_branch(seen: Seen) -> bool:
    """C03: a probe sighted it (``Seen.sighted``: PyTorch compute that ran counts under the strict policy
    only)."""
    return seen.sighted(C03)


@_code(C04, row=4,
       pattern="inheriting from Model / calling super().forward / holding a Model",
       caught_by="static: ModelNew's bases, any use of the name Model; runtime: no submodule of ModelNew is a "
                 "Model",
       fix="write ModelNew as its own nn.Module; do not inherit from, call or hold the reference Model")
def reference_model(seen: Seen) -> bool:
    """C04: a probe sighted it (``Seen.sighted``: PyTorch compute that ran counts under the strict policy
    only)."""
    return seen.sighted(C04)


@_code(C05, row=5,
       pattern="returning an input, a constant or zeros",
       caught_by="judge: fresh random inputs per trial; an output equal to an input, constant, or all zeros "
                 "where the reference is not",
       fix="compute the output from this call's inputs")
def constant_output(seen: Seen) -> bool:
    """C05: a probe sighted it (``Seen.sighted``: PyTorch compute that ran counts under the strict policy
    only)."""
    return seen.sighted(C05)


@_code(C06, row=6,
       pattern="reading stale or uninitialised memory (torch.empty picking up a freed result)",
       caught_by="runtime: freed memory is poisoned before every candidate call (glibc MALLOC_PERTURB_ on cpu, "
                 "a NaN-filled block through the caching allocator on cuda); judge: output elements still "
                 "holding the poison pattern; the reference never runs in the candidate's process during "
                 "correctness",
       fix="write every element of the output in your kernel; never rely on what memory held before")
def stale_memory(seen: Seen) -> bool:
    """C06: a probe sighted it (``Seen.sighted``: PyTorch compute that ran counts under the strict policy
    only)."""
    return seen.sighted(C06)


@_code(C07, row=7,
       pattern="mutating inputs",
       caught_by="runtime: inputs compared with untouched copies after every correctness trial; harness: every "
                 "timed call's inputs compared outside the candidate's process with what the harness wrote "
                 "into its pool; judge: the reference runs on its own copies in another process",
       fix="leave the inputs unchanged: write results into new tensors")
def input_mutation(seen: Seen) -> bool:
    """C07: a probe sighted it (``Seen.sighted``: PyTorch compute that ran counts under the strict policy
    only)."""
    return seen.sighted(C07)


@_code(C08, row=8,
       pattern="caching outputs across calls",
       caught_by="judge: an output bit-identical to an earlier trial's output on different inputs; fresh "
                 "inputs for every timed iteration",
       fix="recompute the output on every call; never keep results across calls")
def output_caching(seen: Seen) -> bool:
    """C08: a probe sighted it (``Seen.sighted``: PyTorch compute that ran counts under the strict policy
    only)."""
    return seen.sighted(C08)


@_code(C09, row=9,
       pattern="work on a side stream or a background thread so timing misses it",
       caught_by="static: threading/concurrent/torch.cuda.Stream; runtime: the candidate's threads still at "
                 "work (not parked) after import, forward and the timed calls; on cuda the whole device is "
                 "synchronised before the end event",
       fix="finish all work before forward returns, on the current stream; join any side stream and start no "
           "thread that keeps working")
def side_work(seen: Seen) -> bool:
    """C09: a probe sighted it (``Seen.sighted``: PyTorch compute that ran counts under the strict policy
    only)."""
    return seen.sighted(C09)


@_code(C10, row=10,
       pattern="a lazy tensor subclass or deferred work in the checker",
       caught_by="runtime: outputs must be exactly torch.Tensor, strided, with storage, on the task's device",
       fix="return plain torch.Tensor outputs, computed before forward returns")
def lazy_output(seen: Seen) -> bool:
    """C10: a probe sighted it (``Seen.sighted``: PyTorch compute that ran counts under the strict policy
    only)."""
    return seen.sighted(C10)


@_code(C11, row=11,
       pattern="monkeypatching torch, the verifier or builtins",
       caught_by="runtime: identities of the functions the checks use are compared with the originals after "
                 "import and after every forward; the comparison with the reference happens in the verifier "
                 "process",
       fix="leave torch, the verifier and builtins as they are; change no global state")
def monkeypatch(seen: Seen) -> bool:
    """C11: a probe sighted it (``Seen.sighted``: PyTorch compute that ran counts under the strict policy
    only)."""
    return seen.sighted(C11)


@_code(C12, row=12,
       pattern="predicting the random inputs",
       caught_by="static: seeding / RNG-state calls in forward and what it calls (at import or construction no "
                 "trial seed exists yet); judge: inputs are drawn in the verifier process from fresh per-trial "
                 "seeds the candidate never sees",
       fix="do not seed or read random number generators; the inputs are drawn where you cannot see them")
def seed_prediction(seen: Seen) -> bool:
    """C12: a probe sighted it (``Seen.sighted``: PyTorch compute that ran counts under the strict policy
    only)."""
    return seen.sighted(C12)


@_code(C13, row=13,
       pattern="computing in lower precision inside a loose tolerance",
       caught_by="judge: fp32 tolerance 1e-4; output dtype must match; errors in the low-precision band are "
                 "named",
       fix="compute in the output's precision (fp32 for fp32 outputs; no fp16, bf16 or TF32 inside)")
def precision_loss(seen: Seen) -> bool:
    """C13: a probe sighted it (``Seen.sighted``: PyTorch compute that ran counts under the strict policy
    only)."""
    return seen.sighted(C13)


@_code(C14, row=14,
       pattern="hard-coding the benchmark shapes",
       caught_by="judge: one more valid input shape (first dimension changed); passing the benchmark shape but "
                 "failing it is this cheat",
       fix="read sizes from the inputs: the kernel must be correct for any valid shape, not only the "
           "benchmark's")
def hardcoded_shape(seen: Seen) -> bool:
    """C14: a probe sighted it (``Seen.sighted``: PyTorch compute that ran counts under the strict policy
    only)."""
    return seen.sighted(C14)


@_code(C15, row=15,
       pattern="reading expected outputs through gc, frames or files",
       caught_by="static: gc / inspect / sys._getframe / open / pathlib; structurally: reference outputs never "
                 "exist in the candidate's process while it runs",
       fix="read nothing but your inputs and weights: no files, frames or garbage-collector objects")
def reads_expected(seen: Seen) -> bool:
    """C15: a probe sighted it (``Seen.sighted``: PyTorch compute that ran counts under the strict policy
    only)."""
    return seen.sighted(C15)


@_code(C16, row=16,
       pattern="behaving differently in timed runs",
       caught_by="judge: timed outputs (fresh inputs each) are checked against the reference; correct in the "
                 "trials but wrong when timed is this cheat",
       fix="compute the same way on every call, timed or not")
def warmup_detection(seen: Seen) -> bool:
    """C16: a probe sighted it (``Seen.sighted``: PyTorch compute that ran counts under the strict policy
    only)."""
    return seen.sighted(C16)


@_code(C17, row=17,
       pattern="sleeping, spinning, forking, network or filesystem access",
       caught_by="static: subprocess / socket / os.system / os.fork / ctypes / time.sleep ...; runtime: "
                 "wall-clock timeout, address-space limit, no network namespace where the OS allows, a clear "
                 "verdict",
       fix="no processes, sleeps, network or files outside the build: compute in your kernel")
def sandbox_escape(seen: Seen) -> bool:
    """C17: a probe sighted it (``Seen.sighted``: PyTorch compute that ran counts under the strict policy
    only)."""
    return seen.sighted(C17)


@_code(C18, row=18,
       pattern="printing or writing a fake verdict",
       caught_by="structural: results travel on a private pipe and are rebuilt by the verifier; candidate "
                 "stdout is data; static: raw fd writes; runtime: verdict-looking text in the candidate's "
                 "output is flagged",
       fix="print nothing that looks like a verdict; the verifier writes its own")
def fake_verdict(seen: Seen) -> bool:
    """C18: a probe sighted it (``Seen.sighted``: PyTorch compute that ran counts under the strict policy
    only)."""
    return seen.sighted(C18)


@_code(C19, row=1,
       pattern="PyTorch compute in forward on a path that never ran (a fallback for shapes the task cannot "
               "produce, a branch its inputs never take): the strict policy rejects it, the partial policy "
               "does not count it",
       caught_by="static: the C01 scan found PyTorch compute in forward, or the built extension imports ATen "
                 "compute ops (its C++ calls at::matmul: a thread, a process or a dispatch-key guard of its "
                 "own could hide it from either monitor); runtime: neither monitor saw PyTorch compute on any "
                 "trial, the extra shape or the timed calls (where they did, it is C01)",
       fix="remove the PyTorch path your inputs never take, or handle those inputs in your own kernel (the "
           "strict policy allows no PyTorch compute in forward, run or not)")
def unrun_torch_path(seen: Seen) -> bool:
    """C19: under the strict policy, the scans outside the process found PyTorch compute in forward's code or
    the built library and no runtime monitor saw it run (where one did, it is C01)."""
    return seen.legality == "strict" and seen.torch_found and not seen.torch


CODES = tuple(CATALOGUE)
assert CODES == (C01, C02, C03, C04, C05, C06, C07, C08, C09, C10, C11, C12, C13, C14, C15, C16, C17, C18, C19)


def decide(seen: Seen) -> list[str]:
    """The codes that fire for what the probes saw, sorted: every code's check asked once."""
    return sorted(code for code, c in CHECKS.items() if c.decide(seen))


def describe(code: str) -> str:
    """One line naming the cheat and what to do instead, for feedback."""
    c = CATALOGUE.get(code)
    return f"{code}: {c.pattern} (instead: {c.fix})" if c else code


# ------------------------------------------------------------------------------------------- the probes
def probe(*codes: str, where: str):
    """Register the decorated function as a probe gathering evidence of each of ``codes`` (the function is
    returned unchanged). Raises KeyError for a code the catalogue does not define, ValueError for an unknown
    ``where``."""
    if where not in WHERE:
        raise ValueError(f"where must be one of {WHERE}, got {where!r}")
    unknown = [c for c in codes if c not in CATALOGUE]
    if unknown or not codes:
        raise KeyError(f"codes the catalogue does not define: {unknown or '(none given)'}")

    def register(fn):
        name = f"{fn.__module__}.{fn.__qualname__}"
        for code in codes:
            if all(p.function != name for p in PROBES[code]):
                PROBES[code].append(Probe(code, name, where))
        return fn
    return register


def registered() -> dict[str, tuple[Check, list[Probe]]]:
    """Every code's check and its probes. Probes register as the modules that define them are imported;
    ``verifier.engine`` imports every one of them."""
    return {code: (CHECKS[code], list(PROBES[code])) for code in CODES}
