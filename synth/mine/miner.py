"""Mine nn.Module subclasses from real code into runnable KernelBench-format tasks, with a yield report.

A module travels through these steps, each counted in :class:`MineReport`:

    files            read from the source (synth/mine/sources.py); binary, non-UTF-8, huge and
                     unparsable files are counted and skipped
    modules found    nn.Module subclasses found by tree-sitter (synth/mine/discover.py)
    self-contained   its dependency closure cut out as one program with ``class Model``
                     (synth/mine/extract.py)
    license allowed  the source's license is on the allowlist ("unknown" when the source gives none)
    inputs deduced   constructor arguments (the repository's own calls of the class,
                     synth/mine/callsites.py, then guesses: synth/mine/init_args.py) and forward inputs
                     (synth/mine/input_synthesis.py) found in the sandbox (synth/mine/input_sandbox.py),
                     then shapes scaled toward ``target_numel``; a class with keyword-only
                     arguments gets a ``Model`` subclass that takes them positionally
    filters          float_output, no_io_or_randomness, deterministic, input_dependent, runtime
    runs from file   the finished program, written to its own file, runs in a fresh sandboxed process
    tasks emitted    exact duplicates (same normalised program) collapse to the first one found

Mined code only ever runs inside the sandbox's forked children, never in this process.
"""

from __future__ import annotations

import ast
import concurrent.futures as cf
import json
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kernelmill.schema import Origin, Task, TensorSpec
from kernelmill.settings import MineSettings  # the library functions' keyword defaults are its defaults
from synth.mine.callsites import find_call_sites, provider_sites
from synth.mine.discover import FileSyntaxError, NotSelfContained, RepoIndex, find_module_classes, parse_file
from synth.mine.extract import extract_module, rename_identifier
from synth.mine.input_sandbox import SandboxPool
from synth.mine.input_synthesis import FILTERS, MASK_KEEP
from synth.mine.sources import SkippedFile, decode_source_file, iter_repos, source_kind

STEPS = ("modules_found", "self_contained", "license_allowed", "inputs_deduced")


@dataclass
class MineReport:
    """Counts per step of one mining run (see module docstring) and why modules dropped out."""
    source: str = ""
    files: int = 0
    files_parsed: int = 0
    file_skips: Counter = field(default_factory=Counter)
    modules_found: int = 0
    self_contained: int = 0
    not_self_contained: Counter = field(default_factory=Counter)
    license_allowed: int = 0
    license_rejected: Counter = field(default_factory=Counter)
    inputs_deduced: int = 0
    deduction_failures: Counter = field(default_factory=Counter)
    passed_filters: dict = field(default_factory=dict)
    filter_failures: Counter = field(default_factory=Counter)
    runs_from_file: int = 0
    run_file_failures: Counter = field(default_factory=Counter)
    duplicates: int = 0
    tasks_emitted: int = 0
    seconds: float = 0.0
    modules: list = field(default_factory=list)  # one row per module: repo, path, class, outcome, detail

    @property
    def yield_(self) -> float:
        return self.tasks_emitted / self.modules_found if self.modules_found else 0.0

    def as_dict(self) -> dict:
        return {
            "source": self.source, "files": self.files, "files_parsed": self.files_parsed,
            "file_skips": dict(self.file_skips), "modules_found": self.modules_found,
            "self_contained": self.self_contained, "not_self_contained": dict(self.not_self_contained),
            "license_allowed": self.license_allowed, "license_rejected": dict(self.license_rejected),
            "inputs_deduced": self.inputs_deduced, "deduction_failures": dict(self.deduction_failures),
            "passed_filters": {f: self.passed_filters.get(f, 0) for f in FILTERS},
            "filter_failures": dict(self.filter_failures), "runs_from_file": self.runs_from_file,
            "run_file_failures": dict(self.run_file_failures), "duplicates": self.duplicates,
            "tasks_emitted": self.tasks_emitted, "yield": round(self.yield_, 4), "seconds": round(self.seconds, 2),
            "modules": self.modules,
        }

    def rows(self) -> list[tuple[str, int, str]]:
        def why(c: Counter) -> str:
            return ", ".join(f"{k} {v}" for k, v in c.most_common())

        rows = [("files", self.files, ""), ("files parsed", self.files_parsed, why(self.file_skips)),
                ("modules found", self.modules_found, ""),
                ("made self-contained", self.self_contained, why(self.not_self_contained)),
                ("license allowed", self.license_allowed, why(self.license_rejected)),
                ("inputs deduced", self.inputs_deduced, why(self.deduction_failures))]
        for f in FILTERS:
            rows.append((f"passed {f}", self.passed_filters.get(f, 0),
                         why(Counter({k: v for k, v in self.filter_failures.items() if k == f}))))
        rows += [("runs from its own file", self.runs_from_file, why(self.run_file_failures)),
                 ("tasks emitted", self.tasks_emitted, f"{self.duplicates} exact duplicates collapsed")]
        return rows

    def table(self) -> str:
        rows = self.rows()
        w = max(len(r[0]) for r in rows)
        lines = [f"mining report: {self.source}", f"{'step'.ljust(w)}  {'count':>6}  dropped / note",
                 f"{'-' * w}  {'-' * 6}  {'-' * 30}"]
        lines += [f"{name.ljust(w)}  {n:>6}  {note}".rstrip() for name, n, note in rows]
        lines.append(f"{'yield (tasks / modules found)'.ljust(w)}  {self.yield_:>6.3f}  in {self.seconds:.1f} s")
        return "\n".join(lines)

    def markdown(self) -> str:
        out = [f"# Mining report: `{self.source}`", "", "| step | count | dropped / note |", "| --- | ---: | --- |"]
        out += [f"| {name} | {n} | {note} |" for name, n, note in self.rows()]
        out += [f"| yield (tasks / modules found) | {self.yield_:.3f} | {self.seconds:.1f} s |", ""]
        return "\n".join(out)


@dataclass
class MineResult:
    tasks: list[Task]
    report: MineReport


@dataclass
class _Candidate:
    order: int
    repo: str
    path: str
    commit: str
    license: str
    class_name: str
    program: str
    sites: list = field(default_factory=list)  # constructor calls found in the repository (as_job dicts)


# ---------------------------------------------------------------------------- rendering


def _shape_src(shape: list[int]) -> str:
    return ", ".join(str(d) for d in shape)


def _input_maker(spec: dict) -> str:
    shape = _shape_src(spec["shape"]) + ("," if len(spec["shape"]) == 1 else "")
    if spec["kind"] == "int":
        return f"torch.randint(0, {spec['hi']}, ({shape}))"
    if spec["kind"] == "bool":
        return f"torch.rand({_shape_src(spec['shape'])}) < {MASK_KEEP}"
    return f"torch.randn({_shape_src(spec['shape'])})"


def needs_wrapper(deduced: dict) -> bool:
    """Whether the mined class takes keyword-only constructor or forward arguments, which
    ``Model(*get_init_inputs())(*get_inputs())`` cannot pass."""
    return any(p["keyword"] for p in deduced.get("init_params", [])) or any(i.get("keyword") for i in deduced["inputs"])


def wrap_keyword_only(program: str, class_name: str, deduced: dict) -> str:
    """The program with the mined class under its own name again and a ``Model`` subclass that takes
    every argument positionally and passes keyword-only ones by name. The subclass adds no state:
    parameters and buffers keep the mined class's names."""
    inner = class_name if class_name != "Model" else "_MinedModel"
    alias = f"\n{class_name} = Model\n"
    program = program.replace(alias, "\n") if alias in program else program
    if re.search(rf"\b{re.escape(inner)}\b", program):
        inner = f"_Mined{class_name}"
    program = rename_identifier(program, "Model", inner)
    init = deduced.get("init_params", [])
    lines = [f"class Model({inner}):",
             f'    """{class_name} with its keyword-only arguments taken positionally (KernelBench calls',
             '    Model(*get_init_inputs()) and model(*get_inputs())); it adds no state of its own."""']
    if any(p["keyword"] for p in init):
        call = [p["name"] if not p["keyword"] else f"{p['name']}={p['name']}" for p in init]
        lines += ["", f"    def __init__(self, {', '.join(p['name'] for p in init)}):",
                  f"        super().__init__({', '.join(call)})"]
    inputs = deduced["inputs"]  # forward is always spelled out: a KernelBench Model defines its own
    call = [i["name"] if not i.get("keyword") else f"{i['name']}={i['name']}" for i in inputs]
    lines += ["", f"    def forward(self, {', '.join(i['name'] for i in inputs)}):",
              f"        return super().forward({', '.join(call)})"]
    return program.rstrip() + "\n\n\n" + "\n".join(lines) + "\n"


def render_task_program(c: _Candidate, deduced: dict) -> str:
    """The KernelBench file: the extracted program plus get_inputs() and get_init_inputs(); a class with
    keyword-only arguments gets a ``Model`` wrapper (see ``wrap_keyword_only``)."""
    program = c.program
    if deduced.get("needs_types") and not re.search(r"^import types$", program, re.M):
        program = program.replace("import torch\n", "import torch\nimport types\n", 1)
    if needs_wrapper(deduced):
        program = wrap_keyword_only(program, c.class_name, deduced)
    makers = [_input_maker(spec) for spec in deduced["inputs"]]
    header = (f"# Mined from {c.repo}: {c.path}, class {c.class_name} (license {c.license}"
              + (f", commit {c.commit[:12]}" if c.commit else "") + ")\n")
    return (header + program.rstrip() + "\n\n\n"
            + "def get_inputs():\n    return [" + ", ".join(makers) + "]\n\n\n"
            + "def get_init_inputs():\n    return [" + ", ".join(deduced["init_args"]) + "]\n")


def _task_name(repo: str, class_name: str) -> str:
    base = re.sub(r"[^A-Za-z0-9]+", "_", repo.split("/")[-1]).strip("_")
    return f"{base}_{class_name}" if base else class_name


# ---------------------------------------------------------------------------- stages


def collect_candidates(source: str, report: MineReport, *, max_file_bytes: int, max_files: int | None = None):
    """Yield self-contained programs of every module found in SOURCE, counting what drops out."""
    order = 0
    for group in iter_repos(source, max_file_bytes=max_file_bytes):
        parsed, licenses, commits = [], {}, {}
        for f in group.files:
            if max_files is not None and report.files >= max_files:
                break
            report.files += 1
            try:
                pf = parse_file(f.path, decode_source_file(f, max_file_bytes=max_file_bytes))
            except SkippedFile as e:
                report.file_skips[e.reason] += 1
                continue
            except (FileSyntaxError, RecursionError):
                report.file_skips["syntax_error"] += 1
                continue
            report.files_parsed += 1
            parsed.append(pf)
            licenses[pf.path], commits[pf.path] = f.license, f.commit
        index = RepoIndex(parsed)
        for pf in parsed:
            for found in find_module_classes(index, pf):
                report.modules_found += 1
                row = {"repo": group.repo, "path": pf.path, "class": found.class_name}
                if not found.has_forward:
                    report.not_self_contained["no_forward"] += 1
                    report.modules.append({**row, "outcome": "no_forward", "detail": ""})
                    continue
                try:
                    em = extract_module(index, pf, found.class_name)
                except NotSelfContained as e:
                    report.not_self_contained[e.reason] += 1
                    report.modules.append({**row, "outcome": e.reason, "detail": e.detail})
                    continue
                except RecursionError:
                    report.not_self_contained["too_deep"] += 1
                    report.modules.append({**row, "outcome": "too_deep", "detail": ""})
                    continue
                report.self_contained += 1
                program, sites = with_call_sites(em, index, pf, found.class_name)
                yield _Candidate(order, group.repo, pf.path, commits[pf.path], licenses[pf.path], found.class_name,
                                 program, sites)
                order += 1
        if max_files is not None and report.files >= max_files:
            return


def _literal_assignment(text: str) -> bool:
    """``cfg = {'VGG11': [64, 'M']}``: a plain name bound to a literal, which runs without side effects."""
    try:
        tree = ast.parse(text)
        stmt = tree.body[0]
        if len(tree.body) != 1 or not isinstance(stmt, ast.Assign):
            return False
        ast.literal_eval(stmt.value)
        return True
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return False


def with_call_sites(em, index, pf, class_name: str) -> tuple[str, list[dict]]:
    """The program extended with what the repository's own constructor calls of the class read, and
    those calls (synth/mine/callsites.py). A call is dropped when its names cannot be made
    self-contained or would bring in top-level statements of the calling file other than definitions
    and literal assignments (``checkpoint = torch.load('out/ckpt.pt')`` in a script that builds the
    model); the top-level statements of the library files it imports (``LinearNoBias = partial(...)``)
    run whenever the repository's own code is imported, and are kept."""
    program, kept, needs, before = em.program, [], [], set(em.statements)
    # the class's own calls first, then calls made up for its model-valued parameters (fallbacks)
    for site in find_call_sites(index, pf, class_name) + provider_sites(index, pf, class_name):
        trial = needs + [(index.files[m], n) for m, n in site.needs]
        if site.needs:
            try:
                ext = extract_module(index, pf, class_name, trial)
            except (NotSelfContained, RecursionError):
                continue
            if not all(_literal_assignment(t) for path, t in ext.statements if (path, t) not in before
                       and path == site.path):
                continue
            program, needs = ext.program, trial
        kept.append(site.as_job())
    return program, kept


def installed_imports(program: str) -> list[str]:
    """The third-party packages a program imports (top-level names, torch and the standard library
    aside): extracted programs import only installed packages, their own code is inlined."""
    names = re.findall(r"^(?:import|from)\s+([A-Za-z_]\w*)", program, re.M)
    return [n for n in dict.fromkeys(names) if n != "torch" and n not in sys.stdlib_module_names
            and n != "__future__"]


def _process(pool, c: _Candidate, *, target_numel: int, timeout_s: float, max_forward_s: float,
             min_forward_s: float, scale_work: float | None = None) -> tuple[_Candidate, dict, dict | None, str | None]:
    """Deduce in the sandbox, then run the finished program from its own file in a fresh child."""
    preload = installed_imports(c.program)
    deduced = pool.run({"mode": "deduce", "program": c.program, "target_numel": target_numel, "init_sites": c.sites,
                        "preload": preload,
                        "timeout_s": timeout_s, "budget_s": max(1.0, timeout_s * 0.8),
                        "max_forward_s": max_forward_s, "min_forward_s": min_forward_s,
                        "scale_work": scale_work})
    if deduced.get("status") != "ok":
        return c, deduced, None, None
    code = render_task_program(c, deduced)
    ran = pool.run({"mode": "run_file", "program": code, "timeout_s": timeout_s, "preload": preload})
    if ran.get("status") == "ok" and [o["shape"] for o in ran["outputs"]] != [o["shape"] for o in deduced["outputs"]]:
        ran = {"status": "fail", "reason": "output_shape_changed",
               "error": f"{ran['outputs']} vs deduced {deduced['outputs']}"}
    return c, deduced, ran, code


def mine_tasks(source: str, *, target_numel: int, timeout_s: float, license_allowlist: list[str],
               workers: int = MineSettings.workers, max_file_bytes: int = MineSettings.max_file_bytes,
               memory_limit_gb: float = MineSettings.memory_limit_gb, max_forward_s: float = MineSettings.max_forward_s,
               min_forward_s: float = MineSettings.min_forward_s, max_files: int | None = None,
               scale_work: float | None = MineSettings.scale_work,
               progress: Callable[[int, int], None] | None = None) -> MineResult:
    """Mine SOURCE (a directory, a git path or URL, or ``hf:NAME[:COLUMN]``) into github Tasks.

    Guarantees: every returned task's reference_code ran from its own file in a fresh process and
    produced the recorded output shapes; task ids are unique (exact duplicates collapsed, the first
    in source order kept). Bad files and modules are counted in the report, never raised. Raises
    InputError only for a SOURCE that cannot be opened at all (a bad path, an unreachable URL).
    Not guaranteed: that a task computes anything interesting, or that it is fast on a GPU.

    Time budget per module: ``timeout_s`` for deduction (the sandbox kills it after that) and again
    for the run from its own file, and ``max_forward_s`` for one forward at the final shapes (the runtime
    filter), all read on synth/mine/own_clock.py's clock (wall time minus the time the process waited for a
    CPU), so a busy machine makes mining slower, not different; inputs stop growing toward ``target_numel``
    once one forward's work (FLOPs + elements written, counted by torch's dispatcher) would pass
    ``scale_work``, which keeps heavy modules (attention over many tokens) at a few seconds each. Input sizes
    come from the program, never from wall time: the same SOURCE gives the same task ids on any machine load
    (tests/test_mine_deterministic.py mines under four busy processes on two cores)."""
    source_kind(source)  # a SOURCE that is none of the accepted forms fails here, before any process starts
    t0 = time.monotonic()
    allow = {x.lower() for x in license_allowlist}
    report = MineReport(source=source)
    results: dict[int, tuple] = {}
    with SandboxPool(workers=workers, memory_bytes=int(memory_limit_gb * (1 << 30))) as pool, \
            cf.ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
        pending: set = set()
        counts = [0, 0]  # done, submitted

        def finished(fut) -> None:
            res = fut.result()
            results[res[0].order] = res
            counts[0] += 1
            if progress:
                progress(counts[0], counts[1])

        for c in collect_candidates(source, report, max_file_bytes=max_file_bytes, max_files=max_files):
            if c.license.lower() not in allow:
                report.license_rejected[c.license] += 1
                report.modules.append({"repo": c.repo, "path": c.path, "class": c.class_name,
                                       "outcome": "license", "detail": c.license})
                continue
            report.license_allowed += 1
            pending.add(ex.submit(_process, pool, c, target_numel=target_numel, timeout_s=timeout_s,
                                  max_forward_s=max_forward_s, min_forward_s=min_forward_s,
                                  scale_work=scale_work))
            counts[1] += 1
            if len(pending) >= 4 * max(1, workers):  # bounded memory on large streamed sources
                done, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
                for fut in done:
                    finished(fut)
        for fut in cf.as_completed(pending):
            finished(fut)

    tasks: dict[str, Task] = {}
    for order in sorted(results):
        c, deduced, ran, code = results[order]
        row = {"repo": c.repo, "path": c.path, "class": c.class_name,
               "seconds": round(deduced.get("seconds", 0.0) + (ran or {}).get("seconds", 0.0), 2)}
        stage = deduced.get("stage")
        if deduced.get("status") != "ok" and stage != "filter":
            report.deduction_failures[deduced.get("reason", "crash")] += 1
            report.modules.append({**row, "outcome": deduced.get("reason", "crash"), "detail": deduced.get("error", "")})
            continue
        report.inputs_deduced += 1
        row["phase_s"] = deduced.get("phase_s", {})
        failed = deduced.get("reason") if stage == "filter" else None
        for f in FILTERS:
            if f == failed:
                break
            report.passed_filters[f] = report.passed_filters.get(f, 0) + 1
        if failed:
            report.filter_failures[failed] += 1
            report.modules.append({**row, "outcome": failed, "detail": deduced.get("error", "")})
            continue
        if ran is None or ran.get("status") != "ok":
            reason = (ran or {}).get("reason", "run_file_failed")
            report.run_file_failures[reason] += 1
            report.modules.append({**row, "outcome": reason, "detail": (ran or {}).get("error", "")})
            continue
        report.runs_from_file += 1
        task = Task.from_code(
            code, name=_task_name(c.repo, c.class_name), source="github", level=0,
            origin=Origin(repo=c.repo, path=c.path, commit=c.commit, license=c.license, class_name=c.class_name),
            input_specs=[TensorSpec(i["name"], i["shape"], i["dtype"]) for i in deduced["inputs"]],
            output_specs=[TensorSpec(f"out{k}", o["shape"], o["dtype"]) for k, o in enumerate(deduced["outputs"])],
            init_inputs="[" + ", ".join(deduced["init_args"]) + "]",
            annotations={"mine": {"forward_s_cpu": deduced.get("forward_s"), "target_numel": target_numel}})
        if task.task_id in tasks:
            report.duplicates += 1
            report.modules.append({**row, "outcome": "duplicate", "detail": tasks[task.task_id].name})
            continue
        tasks[task.task_id] = task
        report.modules.append({**row, "outcome": "task", "detail": task.task_id})
    report.tasks_emitted = len(tasks)
    report.seconds = time.monotonic() - t0
    return MineResult(list(tasks.values()), report)


# ---------------------------------------------------------------------------- reports


def write_report(out: str | Path, report: MineReport) -> None:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("mine_report.json", json.dumps(report.as_dict(), indent=2, sort_keys=True)),
                       ("mine_report.md", report.markdown())):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)
