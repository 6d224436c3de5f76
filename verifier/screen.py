"""The screening stages of a candidate, before anything of it runs (stages 1-3 of verifier/engine.py's path):
extraction and the static stage (the Python text's scan, the source and tampering scans of every ``load_inline`` call
it resolves), then the compile results and the built library's scan. Each returns the candidate's Work, its verdict
finished where a stage stopped it; what passes goes on to execution (verifier/engine.py).
"""

from __future__ import annotations

import time
from pathlib import Path

from kernelmill.schema import Verdict
from verifier import cheats
from verifier.build.result import first_errors
from verifier.common import sandbox
from verifier.front.binary import scan_binary, scan_tampering
from verifier.front.extract import check_candidate_shape, extract_code
from verifier.front.static import scan
from verifier.front.vendor import scan_sources
from verifier.judge.verdict import Work, finish

__all__ = ["front", "compile_done"]


def front(reference_code: str, candidate_text: str, backend: str, task_id: str, candidate_id: str) -> Work:
    """Extract and static stages; the returned work's verdict has a status when it stopped here. Whatever a
    candidate's text does to these stages, it ends as that candidate's verdict: a failure of the verifier's
    own scanning code is a ``verifier_error`` for this candidate, and the batch goes on."""
    t0 = time.perf_counter()
    v = Verdict(candidate_id=candidate_id, task_id=task_id, backend=backend)
    v.stage_reached = "extract"
    w = Work(verdict=v, reference_code=reference_code, started=t0)
    try:
        return _front_stages(w, candidate_text, backend, t0)
    except Exception as e:  # noqa: BLE001
        finish(w, "verifier_error", [f"The verifier's {v.stage_reached} stage failed on this candidate "
                                     f"({type(e).__name__}: {str(e)[:300]}); this is the verifier's fault, not "
                                     "your program's."])
        return w


def _front_stages(w: Work, candidate_text: str, backend: str, t0: float) -> Work:
    v = w.verdict
    code = extract_code(candidate_text)
    problems = check_candidate_shape(code, backend)
    v.stage_seconds["extract"] = round(time.perf_counter() - t0, 4)
    if problems:
        if any("never launched" in p for p in problems):
            # a kernel defined but never launched is row 2, not a format slip; whatever computes the answer
            # instead (cuBLAS, ATen, a patched clock) is judged by the static stage too, so that the verdict
            # names every row the program breaks, not the first one found
            report, vendor, tamper = _static_stage(code, backend, v)
            v.cheats = cheats.decide(cheats.Seen(frozenset({cheats.C02}) | _static_codes(report, vendor, tamper)))
            problems = problems + _static_lines(report, vendor, tamper)
        finish(w, "extract_error", problems)
        return w
    w.code = code
    report, vendor, tamper = _static_stage(code, backend, v)
    # PyTorch compute alone does not stop the candidate here: it is judged to the end so that the verdict can
    # say what the partial legality policy (KernelBench's) makes of it; the strict policy rejects it then
    blocking = [f for f in report.findings if not f.torch]
    v.fallback_ops = report.fallback_ops
    if blocking or vendor or tamper:
        v.cheats = cheats.decide(cheats.Seen(_static_codes(report, vendor, tamper)))
        finish(w, "cheat", _static_lines(report, vendor, tamper))
        return w
    w.torch_findings = [str(f) for f in report.findings]
    # load_inline calls with non-constant arguments are built inside the child (allow_child_compile): the
    # source and binary scans do not see them; the runtime monitors and time coverage still do
    v.stage_reached = "compile"
    w.specs = [s.args for s in report.extensions if s.resolved]
    return w


def _static_stage(code: str, backend: str, v: Verdict):
    """The static scan of the Python text and the source and tampering scans of every load_inline call it
    resolves: (report, vendor findings, tampering findings)."""
    v.stage_reached = "static"
    t1 = time.perf_counter()
    report = scan(code, backend)
    v.stage_seconds["static"] = round(time.perf_counter() - t1, 4)
    vendor, tamper = [], []
    for spec in report.extensions:
        srcs = _sources(spec.args)
        vendor += scan_sources(srcs, _as_strs(spec.args.get("extra_ldflags")))
        tamper += scan_tampering(srcs)
    return report, vendor, tamper


def _static_codes(report, vendor: list, tamper: list) -> frozenset[str]:
    """The cheat codes the static stage's probes sighted, PyTorch compute's included (the stage stops a candidate
    only for a finding no policy allows; the verdict then names all it saw)."""
    return frozenset(report.cheat_codes) | _scan_codes(vendor, tamper)


def _scan_codes(vendor: list, tamper: list) -> frozenset[str]:
    """The codes of the source or binary scans' findings: vendor compute (C01), tampering (C11)."""
    return frozenset(({cheats.C01} if vendor else set()) | ({cheats.C11} if tamper else set()))


def _static_lines(report, vendor: list, tamper: list) -> list[str]:
    return [f"Static check, {f}." for f in report.findings] + _vendor_lines("Static", vendor) + \
        _tamper_lines("Static", tamper)


def _as_strs(x) -> list[str]:
    if x is None:
        return []
    return [str(i) for i in x] if isinstance(x, (list, tuple)) else [str(x)]


def _sources(spec_args: dict) -> list[str]:
    """The C++ and CUDA source texts of one load_inline call's arguments."""
    return [src for key in ("cpp_sources", "cuda_sources") for src in _as_strs(spec_args.get(key))]


def compile_done(w: Work, results: list, build_root: Path | None = None) -> bool:
    """Record compile results; False (and the verdict finished) when any spec failed or its build tried to
    escape the sandbox (C17, from the evidence the sandbox left in the key directory under ``build_root``)."""
    v = w.verdict
    v.stage_seconds["compile"] = round(sum(r.seconds for r in results if not r.cached), 3)
    v.stage_seconds["compile_cpu"] = round(sum(r.cpu_s for r in results if not r.cached), 3)
    v.stage_seconds["compile_lock_wait"] = round(sum(r.lock_wait_s for r in results if not r.cached), 3)
    v.stage_seconds["compile_cached"] = all(r.cached for r in results) if results else True
    escapes = [f for r in results for f in sandbox.escape_findings(build_root / r.key)] if build_root else []
    if escapes:  # the build process (the candidate's static initialisers run when it imports the module) escaped
        v.cheats = cheats.decide(cheats.Seen(frozenset({cheats.C17})))
        v.compile_log = next((r.log for r in results if not r.ok), "")[-20000:]
        finish(w, "cheat", [f"The sandbox blocked, while building: {f}." for f in escapes])
        return False
    broken = [r for r in results if r.verifier_error]
    if broken:  # the verifier's build code failed: never the candidate's compile error
        finish(w, "verifier_error", [f"The verifier's build failed on its own side ({broken[0].verifier_error}); this "
                                     "is not a compile error of your code."])
        return False
    bad = [r for r in results if not r.ok]
    if bad:
        v.compile_log = bad[0].log[-20000:]
        finish(w, "compile_error", ["First compiler errors:\n" + first_errors(bad[0].log)])
        return False
    v.compiled = True
    found = scan_binary([r.so_path for r in results], [src for spec in w.specs for src in _sources(spec)])
    vendor, tamper, computing = found.vendor, found.tamper, found.compute
    if vendor or tamper:  # the linker's view: what the built extension calls by name, however the source spelled it
        v.cheats = cheats.decide(cheats.Seen(_scan_codes(vendor, tamper)))
        finish(w, "cheat", _vendor_lines("Binary", vendor) + _tamper_lines("Binary", tamper))
        return False
    if computing:
        # PyTorch compute reachable from the candidate's C++ (a CPU fallback branch, a helper nobody calls, or the
        # answer), read here, outside the candidate's process: PyTorch compute in forward as the static scan's
        # findings are (the strict policy rejects it: C01 where a monitor saw it run, C19 where none did; the partial
        # policy leaves it to the knockout). No monitor in the candidate's process is the last word on whether it
        # ran: ATen called on a thread the extension starts or borrows (std::thread, an OpenMP team), in a process it
        # forks, or under a dispatch-key guard on the timed calls only, is seen by neither monitor there, while its
        # import is in the binary all the same. Which exported function reaches it the binary does not say, so an
        # ATen helper forward never calls counts too (the strict policy's rule for a PyTorch path that never ran).
        w.note_binary_torch(computing)
    return True


def _vendor_lines(kind: str, found: list[str]) -> list[str]:
    return [f"{kind} check: {f} [C01: compute by a vendor library or ATen internals, not your kernel]." for f in found]


def _tamper_lines(kind: str, found: list[str]) -> list[str]:
    return [f"{kind} check: {f} [C11: the verifier's monitors and torch's global state are not yours to change]."
            for f in found]
