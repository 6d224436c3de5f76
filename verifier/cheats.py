"""The anti-cheat catalogue: one stable code per row of docs/ANTI_CHEAT.md (tests/test_architecture.py keeps the
two equal, and every code asserted by a test); C01-C18 are the design catalogue's rows 1-18 in order, later codes
refine one of them (``Cheat.row``).

Each code names the cheat it stops. The checks themselves live where the evidence is:
static (verifier/static.py, an AST scan before compiling), runtime (verifier/worker.py, inside the
execution child: dispatched aten ops, kernel call counts, thread counts, function identities,
output types) and judge (verifier/api.py, in the verifier process: comparisons against reference
outputs the candidate never saw). ``CATALOGUE[code].caught_by`` says which, in words.

A verdict lists every code that fired (``Verdict.cheats``); any code makes the reward the cheat
reward (verifier/reward.py). Codes are stable strings: corpora and dashboards key on them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cheat:
    code: str
    row: int
    pattern: str
    caught_by: str


_ROWS = [
    ("C01_TORCH_COMPUTE", "PyTorch/ATen/cuBLAS compute in ModelNew (torch.matmul, F.*, @, x.relu(), an nn layer's "
     "forward, torch.compile, at:: compute called from the C++)",
     "static: torch/F calls outside the allocation-and-view allowlist, tensor compute methods, `@`, calls of nn "
     "submodules; runtime: every aten op dispatched during forward (Python and C++) checked against the allowlist"),
    ("C02_KERNEL_NOT_LAUNCHED", "a kernel is compiled but never launched",
     "static: no exported kernel function is referenced by ModelNew; runtime: the extension's functions are "
     "wrapped and counted on every forward, and on cuda the profiler must show one of the candidate's "
     "__global__ kernels"),
    ("C03_FALLBACK_BRANCH", "try: custom() except: reference() fallback, or a reference path on some inputs",
     "static: try/except inside ModelNew whose handler does more than re-raise; runtime dispatch check on "
     "every trial, including the extra shape"),
    ("C04_REFERENCE_MODEL", "inheriting from Model / calling super().forward / holding a Model",
     "static: ModelNew's bases, any use of the name Model; runtime: no submodule of ModelNew is a Model"),
    ("C05_CONSTANT_OUTPUT", "returning an input, a constant or zeros",
     "judge: fresh random inputs per trial; an output equal to an input, constant, or all zeros where the "
     "reference is not"),
    ("C06_STALE_MEMORY", "reading stale or uninitialised memory (torch.empty picking up a freed result)",
     "runtime: freed memory is poisoned before every candidate call (glibc MALLOC_PERTURB_ on cpu, a "
     "NaN-filled block through the caching allocator on cuda); judge: output elements still holding the "
     "poison pattern; the reference never runs in the candidate's process during correctness"),
    ("C07_INPUT_MUTATION", "mutating inputs",
     "runtime: inputs compared with untouched copies after every candidate call; judge: the reference runs "
     "on its own copies in another process"),
    ("C08_OUTPUT_CACHING", "caching outputs across calls",
     "judge: an output bit-identical to an earlier trial's output on different inputs; fresh inputs for "
     "every timed iteration"),
    ("C09_SIDE_WORK", "work on a side stream or a background thread so timing misses it",
     "static: threading/concurrent/torch.cuda.Stream; runtime: the candidate's threads still at work (not parked) "
     "after import, forward and the timed calls; on cuda the whole device is synchronised before the end event"),
    ("C10_LAZY_OUTPUT", "a lazy tensor subclass or deferred work in the checker",
     "runtime: outputs must be exactly torch.Tensor, strided, with storage, on the task's device"),
    ("C11_MONKEYPATCH", "monkeypatching torch, the verifier or builtins",
     "runtime: identities of the functions the checks use are compared with the originals after import and "
     "after every forward; the comparison with the reference happens in the verifier process"),
    ("C12_SEED_PREDICTION", "predicting the random inputs",
     "static: seeding / RNG-state calls; judge: inputs are drawn in the verifier process from fresh "
     "per-trial seeds the candidate never sees"),
    ("C13_PRECISION_LOSS", "computing in lower precision inside a loose tolerance",
     "judge: fp32 tolerance 1e-4; output dtype must match; errors in the low-precision band are named"),
    ("C14_HARDCODED_SHAPE", "hard-coding the benchmark shapes",
     "judge: one more valid input shape (first dimension changed); passing the benchmark shape but "
     "failing it is this cheat"),
    ("C15_READS_EXPECTED", "reading expected outputs through gc, frames or files",
     "static: gc / inspect / sys._getframe / open / pathlib; structurally: reference outputs never exist in "
     "the candidate's process while it runs"),
    ("C16_WARMUP_DETECTION", "behaving differently in timed runs",
     "judge: timed outputs (fresh inputs each) are checked against the reference; correct in the trials "
     "but wrong when timed is this cheat"),
    ("C17_SANDBOX_ESCAPE", "sleeping, spinning, forking, network or filesystem access",
     "static: subprocess / socket / os.system / os.fork / ctypes / time.sleep ...; runtime: wall-clock "
     "timeout, address-space limit, no network namespace where the OS allows, a clear verdict"),
    ("C18_FAKE_VERDICT", "printing or writing a fake verdict",
     "structural: results travel on a private pipe and are rebuilt by the verifier; candidate stdout is "
     "data; static: raw fd writes; runtime: verdict-looking text in the candidate's output is flagged"),
]

# Codes added after the eighteen, each refining a row of the catalogue (its ``row``): where a verdict must tell
# apart two readings of one row that corpora and policies treat differently.
_REFINING = [
    ("C19_UNRUN_TORCH_PATH", 1, "PyTorch compute in forward on a path that never ran (a fallback for shapes the task "
     "cannot produce, a branch its inputs never take): the strict policy rejects it, the partial policy does not "
     "count it",
     "static: the C01 scan found PyTorch compute in forward; runtime: neither monitor saw PyTorch compute on any "
     "trial, the extra shape or the timed calls (where they did, it is C01)"),
]

CATALOGUE: dict[str, Cheat] = {code: Cheat(code, i + 1, pattern, how) for i, (code, pattern, how) in enumerate(_ROWS)}
CATALOGUE.update({code: Cheat(code, row, pattern, how) for code, row, pattern, how in _REFINING})
CODES = tuple(CATALOGUE)

C01, C02, C03, C04, C05, C06, C07, C08, C09, C10, C11, C12, C13, C14, C15, C16, C17, C18, C19 = CODES


def describe(code: str) -> str:
    """One line naming the cheat, for feedback."""
    c = CATALOGUE.get(code)
    return f"{code}: {c.pattern}" if c else code
