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
  code has ever run, so nothing a candidate does to torch can change the reference's times.

Timing (both kinds, the same code) is verifier/child/timing.py; the two op monitors are verifier/child/monitors.py.

What this process does NOT decide: whether outputs are correct. Outputs go to files; the verifier
compares them with reference outputs it computes itself. A crash, hang or memory blow-up of this
process is turned into a verdict by the parent.

Imports: torch and the standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.machinery
import importlib.util
import json
import linecache
import os
import resource
import statistics
import sys
import time
import traceback
import types
from pathlib import Path

import torch
import torch.utils.cpp_extension as cpp_extension
from torch.profiler import record_function
from torch.utils._python_dispatch import _get_current_dispatch_mode

from verifier.child.channel import Channel
from verifier.child.harness_client import BracketClient
from verifier.child.knockout import ChildKnockout
from verifier.child.monitors import (DispatchRecorder, profiled, read_profile, side_work_threads, thread_ids,
                                     threads_beside, watched)
from verifier.child.oplib import Registry
from verifier.child.tamper import Snapshot
from verifier.child.timing import clone, plain_cpu, probe_calls
from verifier.common import childenv
from verifier.common.backends import get_backend, own_kernel_names
from verifier.common.contract import CHILD_BUILT_FILE, FLAGS_FILE, JOB_FILE, ChildReport, Job, ModelTiming, TrialReport
from verifier.common.devlock import device_lock
from verifier.common.inputs import (
    as_list,
    build_model,
    digest,
    draw_inputs,
    init_inputs,
    nbytes,
    seed_everything,
    tensors_of,
    to_device,
)
from verifier.common.spec import canonical_spec, compat_spec, extension_name, spec_key

KERNEL_CALLS = [0]


class CountedExtension(types.ModuleType):
    """The prebuilt extension as the candidate sees it: every exported function counts its calls. With ``knock``
    (a cpu knockout run: verifier/child/knockout.py ``ChildKnockout.knock_call``) each call is knocked out instead
    of returning its result."""

    def __init__(self, mod, knock=None):
        super().__init__(mod.__name__)
        self.__dict__["_km_mod"] = mod
        self.__dict__["_km_knock"] = knock

    def __getattr__(self, name):
        attr = getattr(self.__dict__["_km_mod"], name)
        knock = self.__dict__["_km_knock"]
        if callable(attr) and not name.startswith("__"):
            def counted(*a, **k):
                KERNEL_CALLS[0] += 1
                return attr(*a, **k) if knock is None else knock(name, attr, a, k)
            return counted
        return attr


def _exports(path: str, symbol: str) -> bool:
    """Whether the shared object ``path`` exports ``symbol`` (loading it: its static initialisers run, as any load
    of it runs them)."""
    try:
        return hasattr(ctypes.CDLL(path), symbol)
    except OSError:
        return True  # it does not load: the import as a Python module says why


def _load_so(name: str, path: str):
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def make_prebuilt_load_inline(build_root: str, allow_compile: bool, cuda_kernel_names: list[str], job_dir: Path,
                              on_load=None, knock=None, registry: list | None = None):
    """A load_inline that returns the module the compile pool built for the same spec; compiling here
    only for specs the static stage could not resolve (when allowed), into the same keyed directory, and
    recording each such build (sources, link flags, binary) in ``child_built.json`` for the verifier's
    vendor and tampering scans. ``on_load(so_path)`` is called with each extension's file once it is loaded
    (a knockout run on cuda: verifier/judge/knockout.py); ``knock`` knocks out each call of the extensions' functions
    (a knockout run on cpu), and of its own operators. ``registry``: a list that holds the dispatcher's
    registrations (verifier/child/oplib.py ``Registry``) once the candidate is about to be imported; each load is
    watched by it, which tells the candidate's own operators (``TORCH_LIBRARY``) from anything else it registers.

    ``is_python_module=False`` is loaded as torch loads it, ``torch.ops.load_library`` (a library of operators: no
    Python module), and the path is returned, as torch returns it."""
    original = cpp_extension.load_inline
    kept: list = []  # the knockout's kernels of the own operators (cpu): alive while the candidate runs

    def load(so_path: str, name: str, python_module: bool, build=None, empty_module: bool = False):
        """Load (``build``: build with torch's own load_inline, which loads it) one extension under the registry's
        watch; the knockout's hooks after it. ``empty_module``: ``functions=[]``, for which torch's build writes a
        pybind11 module with nothing in it and the compile pool's none (an empty list and no list share one build):
        a library with no init function is then loaded as one and handed back as the empty module torch's is."""
        reg = registry[0] if registry else None
        before = set(reg.own) if reg is not None else set()
        with reg.loading(so_path or name) if reg is not None else contextlib.nullcontext():
            if build is not None:
                mod = build()
                so_path = so_path or str(mod if isinstance(mod, str) else getattr(mod, "__file__", "") or "")
            elif python_module and not (empty_module and not _exports(so_path, f"PyInit_{name}")):
                mod = _load_so(name, so_path)
            elif python_module:
                torch.ops.load_library(so_path)
                mod = types.ModuleType(name)
            else:
                torch.ops.load_library(so_path)
        if on_load and so_path:
            on_load(so_path)
        if knock is not None and reg is not None:
            _knock_own_operators(sorted(set(reg.own) - before), knock, reg, kept)
        return CountedExtension(mod, knock) if python_module else so_path

    def load_inline(name, cpp_sources=None, cuda_sources=None, functions=None, **kw):
        python_module = kw.pop("is_python_module", True)
        args = dict(kw, cpp_sources=cpp_sources, cuda_sources=cuda_sources, functions=functions)
        key = spec_key(args)
        cuda_kernel_names.extend(own_kernel_names(canonical_spec(args)))
        key_dir = Path(build_root) / key
        res = key_dir / "result.json"
        if os.environ.get(childenv.SANDBOXED) and not res.is_file():
            key_dir = job_dir / "child_build" / key  # the build root is read-only in the sandbox
        if res.is_file():
            d = json.loads(res.read_text())
            if not d["ok"]:
                raise RuntimeError("extension failed to compile (see the compile stage)")
            return load(d["so_path"], extension_name(key), python_module,
                        empty_module=functions is not None and not isinstance(functions, str) and not functions)
        if not allow_compile:
            raise RuntimeError("extension was not built by the compile pool and in-child compilation is off")
        key_dir.mkdir(parents=True, exist_ok=True)
        spec = compat_spec(canonical_spec(args))[0]  # as the compile pool builds it: kernels under their own names
        built = job_dir / CHILD_BUILT_FILE
        entries = json.loads(built.read_text()) if built.is_file() else []
        entry = {"sources": list(spec["cpp_sources"]) + list(spec["cuda_sources"]),
                 "ldflags": list(spec["extra_ldflags"]), "so_path": ""}
        built.write_text(json.dumps(entries + [entry]))  # before the build: a crash mid-build still leaves it
        so = key_dir / f"{extension_name(key)}.so"

        def build():
            return original(name=extension_name(key), build_directory=str(key_dir), is_python_module=python_module,
                            **{k: (v or None) if k in ("cuda_sources", "functions") else v for k, v in spec.items()})

        try:
            return load("", extension_name(key), python_module, build)
        finally:
            entry["so_path"] = str(so) if so.is_file() else ""
            built.write_text(json.dumps(entries + [entry]))

    return load_inline


def _knock_own_operators(ops: list[str], knock, registry, kept: list) -> None:
    """A cpu knockout run: each call of the candidate's own operators ``ops`` knocked out as its extension's
    functions are (``knock``: on copies of its arguments, its result wrong in every value). The verifier registers a
    kernel of its own for them at the Autograd key, which calls the candidate's kernel below it; the registry takes
    it as the operator's registrations now (``adopt``). A failure leaves the operator as it was (the knockout then
    sees its calls run: inconclusive or wrong, never a rejection by itself)."""
    for op in ops:
        ns, _, rest = op.partition("::")
        packet, _, overload = rest.partition(".")
        try:
            handle = getattr(getattr(getattr(torch.ops, ns), packet), overload or "default")
            lib = torch.library.Library(ns, "IMPL")

            def knocked(*args, _handle=handle, _name=op, **kwargs):
                with torch._C._AutoDispatchBelowAutograd():
                    return knock(_name, _handle, args, kwargs)

            lib.impl(rest, knocked, "Autograd")
            kept.append(lib)
            registry.adopt(op)
        except Exception:  # noqa: BLE001 - the knockout's own failure: its calls run as written
            continue


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


def _exec_module(name: str, code: str, filename: str):
    """Run a program as module ``name``. Its text is registered with linecache under ``filename``, so that code
    reading its own source (``inspect.getsource``: a module-level ``@triton.jit``) finds it."""
    mod = types.ModuleType(name)
    mod.__file__ = filename
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    sys.modules[name] = mod
    exec(compile(code, filename, "exec", dont_inherit=True), mod.__dict__)
    return mod


def _output_problem(out, device: str) -> str:
    """Why an output is not a plain dense tensor with real storage on the task's device ("" if it is)."""
    for t in (out if isinstance(out, (tuple, list)) else [out]):
        if type(t) is not torch.Tensor:
            return f"output is a {type(t).__module__}.{type(t).__name__}, not a plain torch.Tensor"
        if t.layout != torch.strided or t.is_meta:
            return f"output has layout {t.layout} / meta={t.is_meta}, not a dense strided tensor"
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
        changes = self.snapshot.changes() + [f"the dispatcher: {c}" for c in (
            self.registry.changes() if self.registry is not None and read else [])]
        if not changes:
            return False
        self.report.patched += [f"{c} (after {phase})" for c in changes]
        self.report.aborted = f"torch or verifier state changed after {phase}"
        (self.job_dir / FLAGS_FILE).write_text(json.dumps({"patched": self.report.patched}))
        return True


def run_job(job_dir: Path) -> ChildReport:
    job = Job.read(job_dir)
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
        return _run_reference(job, job_dir, report, backend)
    return _run_candidate(job, job_dir, report, backend)


class _Clock:
    def __init__(self, report: ChildReport):
        self.report, self.t = report, time.perf_counter()
        self.start = self.t

    def phase(self, name: str) -> None:
        now = time.perf_counter()
        self.report.phase_s[name] = round(now - self.t, 4)
        self.t = now


def _run_reference(job: Job, job_dir: Path, report: ChildReport, backend) -> ChildReport:
    """The eager and ``torch.compile`` timings of the task's reference. Inductor builds the compiled model (host
    work: tracing, code generation, the compilers; tens of seconds for a level-3 network) before the device lock
    is taken, as the compile pool builds candidates beside a timing: holding the lock exclusive for the build
    stopped every other process's trials and timing for as long (KernelBench's real code on an H100: 7 + 7 s
    of lock waits per candidate with the compiled reference timed, 1.3 + 0.5 s without). The build's first call
    runs the graph once on the device; everything timed runs under the exclusive lock, as before."""
    clock = _Clock(report)
    device = backend.device
    try:
        ref = _exec_module("km_reference", job.reference_code, "reference.py")
        model, _ = build_model(ref, job.init_seed, device, job.reference_code, job.eval_mode)
        ch = Channel(job_dir)
    except Exception:  # noqa: BLE001
        report.setup_error = traceback.format_exc(limit=4)[-3000:]
        return report
    clock.phase("load")
    draw = _drawer(ref, device, job.reference_code)
    with torch.no_grad():
        try:
            seeds = ch.timing_seeds()
        except Exception:  # noqa: BLE001
            report.timing_error = traceback.format_exc(limit=3)[-2500:]
            return report
        compiled = _build_compiled(model, draw, seeds, backend, report) if job.time_torch_compile else None
        clock.phase("compile_build")
        with device_lock(job.timing_lock or None) as lock:
            report.timing_exclusive = lock.acquire(True, job.lock_wait_s)
            report.lock_wait_s = round(lock.waited_s, 4)
            clock.phase("lock_wait")
            clocked = BracketClient(ch, job.backend, lambda: draw(seeds[0]))
            try:
                backend.warm_device(job.warm_device_ms)
                # the harness (the verifier's process) clocks every bracket; this process only runs the calls
                template = [t.clone() for t in as_list(model(*draw(seeds[0])))]
                # on cpu the candidate's timed calls run under the dispatch monitor, whose host cost would be
                # the candidate's alone: the reference and the null pay it too (on cuda the host is ahead of the
                # device and the monitors cost no device time)
                wrap = (lambda f: watched(f, DispatchRecorder())) if job.backend == "cpu" else (lambda f: f)
                _brackets(clocked, "reference", wrap(model), job.n_brackets)
                _brackets(clocked, "null", wrap(lambda *x: template), 2 * job.n_brackets)
                clock.phase("eager")
                n = _probe_count(backend, model, draw, seeds, job.gap_probes)
                report.eager = ModelTiming()
                report.eager.launch_us, report.eager.idle_gap_us = probe_calls(backend, model, seeds, draw, n)
            except Exception:  # noqa: BLE001
                report.timing_error = traceback.format_exc(limit=3)[-2500:]
            if compiled is not None and not report.timing_error:
                try:
                    _brackets(clocked, "compiled", wrap(compiled), job.n_brackets)
                    report.compiled = ModelTiming()
                except Exception as e:  # noqa: BLE001
                    report.compile_error = f"{type(e).__name__}: {str(e)[:300]}"
                clock.phase("compile")
    return report


REFERENCE_COMPILE_THREADS = 1  # inductor's compile_threads for the reference's torch.compile (1: no worker pool)


def _build_compiled(model, draw, seeds: list[int], backend, report: ChildReport):
    """``torch.compile(model)`` built by one call on the first timing seed's inputs, outside the device lock;
    None (and ``report.compile_error``) when it does not build or run."""
    try:
        # inductor compiles in this process: its default pool starts a compile worker per core (16 processes, each
        # importing torch and triton) for every task's reference, CPU the candidates' builds need more
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = REFERENCE_COMPILE_THREADS
        compiled = torch.compile(model)
        out = compiled(*draw(seeds[0]))
        backend.synchronize()
        del out
        return compiled
    except Exception as e:  # noqa: BLE001
        report.compile_error = f"{type(e).__name__}: {str(e)[:300]}"
        return None


def _brackets(client: BracketClient, label: str, fn, most: int) -> None:
    """Up to ``most`` clocked brackets of ``fn`` (a first one of a single call, the probe); the harness answers
    "enough" once it has what it needs."""
    for _ in range(most + 1):
        if client.bracket(label, fn) == "enough":
            return


def _probe_count(backend, fn, draw, seeds: list[int], most: int, budget_s: float = 2.0) -> int:
    """One-at-a-time probe calls that fit ``budget_s`` (at least 2), from one call's host time."""
    inputs = draw(seeds[0])
    backend.synchronize()
    t0 = time.perf_counter()
    out = fn(*inputs)
    backend.synchronize()
    call_s = time.perf_counter() - t0
    del out, inputs
    return max(2, min(most, int(budget_s / max(call_s, 1e-9))))


def _drawer(ref, device: str, program_text: str):
    def draw(seed: int) -> list:
        return draw_inputs(ref.get_inputs, seed, device, program_text)
    return draw


def _run_candidate(job: Job, job_dir: Path, report: ChildReport, backend) -> ChildReport:
    """The candidate's trials, runtime checks and timing. Seeds arrive over the channel one step at a time
    (verifier/execute/channel.py): none exists here while the candidate is imported and constructed, and trial i + 1's
    only after trial i delivered its output. Every forward call, timed ones included, runs under both op
    monitors; the timed iterations cannot tell themselves apart from the checked ones."""
    clock = _Clock(report)
    device = backend.device
    cuda_kernels: list[str] = []
    # a knockout run (verifier/judge/knockout.py): the candidate's own launches (cuda) or calls (cpu) are skipped;
    # read before its import
    knockout = ChildKnockout.from_job_dir(job_dir)
    calls = knockout is not None and knockout.calls
    registry: list = []  # the dispatcher's registrations, read right before the candidate is imported (oplib.py)
    cpp_extension.load_inline = make_prebuilt_load_inline(
        job.build_root, job.allow_child_compile, cuda_kernels, job_dir,
        knockout.skip_launches_of if knockout is not None and not calls else None, knockout.knock_call if calls else None,
        registry)
    torch.utils.cpp_extension.load_inline = cpp_extension.load_inline
    # shared while this process works on the device (cuda only: see verifier/runs.py shared_lock), exclusive while it times
    lock = device_lock(job.timing_lock or None)
    if job.backend == "cuda":
        lock.acquire(False, job.lock_wait_s)
        clock.phase("shared_lock_wait")
    try:
        ref = _exec_module("km_reference", job.reference_code, "reference.py")
        model, init = build_model(ref, job.init_seed, device, job.reference_code, job.eval_mode)
        clock.phase("load_reference")
        with profiled(backend):  # the profiler's own threads and state exist before any baseline
            pass
        # the intra-op pool too, on both backends: a pool torch makes lazily (a CPU tensor op in __init__ on a
        # 64-core cuda host started 63 threads) is not the candidate's thread
        torch.ones(1 << 20).sum()
        clock.phase("load_profiler")
        ch = Channel(job_dir)
        guard = Guard(job_dir, report, {"timing backend": backend, "channel": ch})
        registry.append(Registry([job.build_root, str(job_dir)]))
        guard.registry = registry[0]
        clock.phase("load_guard")
    except Exception:  # noqa: BLE001 - nothing of the candidate has run yet
        report.setup_error = traceback.format_exc(limit=4)[-3000:]
        return report
    tids0 = thread_ids()  # the verifier's own threads: any other is the candidate's (C09 judges what they do)
    (job_dir / JOB_FILE).unlink(missing_ok=True)
    try:
        cand = _exec_module("km_candidate", job.candidate_code, "candidate.py")
    except Exception:  # noqa: BLE001
        report.import_error = traceback.format_exc(limit=4)[-3000:]
        return report
    clock.phase("load_candidate_import")
    if guard.tampered("import"):
        return report
    try:
        init_c = init_inputs(ref, job.init_seed, device, job.reference_code)
        seed_everything(job.init_seed)
        model_new = cand.ModelNew(*init_c).to(device)
        if job.eval_mode:
            model_new.eval()
    except Exception:  # noqa: BLE001
        report.init_error = traceback.format_exc(limit=4)[-3000:]
        return report
    sd_ref, sd_new = model.state_dict(), model_new.state_dict()
    if sd_ref and list(sd_ref) == list(sd_new) and all(sd_ref[k].shape == sd_new[k].shape for k in sd_ref):
        model_new.load_state_dict(sd_ref)
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
    draw = _drawer(ref, device, job.reference_code)
    n = job.n_trials
    for i in range(n):
        rec = TrialReport(index=i, started_s=round(time.perf_counter() - clock.start, 4))
        report.trials.append(rec)
        seed = ch.trial_seed(i)
        if job.input_files:
            inputs = to_device(torch.load(job_dir / f"trial_{i}.pt", weights_only=True)["inputs"], device)
        else:
            other = job.other_shape if (job.other_shape and i == n - 1) else ""
            inputs = draw_inputs(ref.get_inputs, seed, device, job.reference_code, other)
        del seed
        pristine = clone(inputs)
        # the reference runs before the candidate on odd trials (its freed result is C06 bait), never on the extra
        # shape's: that trial alone decides C14, and an answer computed here first is one the candidate's native
        # code could keep hold of (an observer, an allocator hook) and hand back. A regular trial's stolen answer
        # buys nothing: the even trials, the reference after, must be right by the candidate's own work.
        ref_first = i % 2 == 1 and not (job.other_shape and i == n - 1)
        with torch.no_grad():
            if ref_first:  # freed memory the reference just wrote is C06 bait; only its digest is kept (C15)
                try:
                    rec.ref_digest = digest(as_list(model(*clone(inputs))))
                except Exception:  # noqa: BLE001 - the reference's failure is not the candidate's
                    report.reference_error = _short_traceback()
                    return report
            backend.synchronize()
            backend.poison_free_memory(nbytes(inputs) * 2)
            KERNEL_CALLS[0] = 0
            recorder = DispatchRecorder()
            try:
                with profiled(backend) as prof:
                    with recorder:
                        with record_function("km_forward"):
                            out = model_new(*inputs)
                        if _get_current_dispatch_mode() is not recorder:
                            rec.monitor_problems.append("the dispatch monitor was removed during forward")
                    backend.synchronize()
            except Exception:  # noqa: BLE001
                rec.error = _short_traceback()
                ch.record(f"trial{i}", rec.to_dict())
                break
            # the candidate's threads as forward returned, read once the profiler's session is over (a thread of
            # the profiler's own that lives for one session is not the candidate's)
            returned = threads_beside(tids0)
            own_in_profile = read_profile(prof, cuda_kernels, rec, registry[0].calls)
            # a call of one of its own operators (torch.ops.<its namespace>) is a call of its extension
            rec.kernel_calls = KERNEL_CALLS[0] + max(registry[0].calls(recorder.ops), own_in_profile)
            rec.dispatched_ops = sorted(set(recorder.ops))
            rec.to_host_bytes = recorder.to_host_bytes
            rec.mutated_inputs = [j for j, (a, b) in enumerate(zip(tensors_of(inputs), tensors_of(pristine)))
                                  if not torch.equal(a, b)]
            rec.output_problem = _output_problem(out, device)
            if not rec.output_problem:
                rec.output_file = _save(plain_cpu(out), job_dir / f"out_{i}.pt")
            del out
            # after the output was read, as the harness reads a timed call's: a thread still at work is side work
            rec.threads_added = side_work_threads(returned, tids0)
            if not ref_first:
                try:
                    rec.ref_output_file = _save(plain_cpu(model(*clone(pristine))), job_dir / f"ref_{i}.pt")
                except Exception:  # noqa: BLE001
                    report.reference_error = _short_traceback()
                    return report
            del inputs, pristine
        ch.record(f"trial{i}", rec.to_dict())  # kept by the verifier as sent: later edits here change nothing
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
        seeds = ch.timing_seeds()
        # one timing phase at a time per device, and no other process's device work meanwhile
        report.timing_exclusive = lock.acquire(True, job.lock_wait_s)
        report.lock_wait_s = round(lock.waited_s, 4)
        if not report.timing_exclusive:
            report.events.append(f"timing ran without the device to itself: the lock was not free within "
                                 f"{job.lock_wait_s:.0f} s")
        clock.phase("timing_lock_wait")
        timed = report.timed = TrialReport(index=-1)
        recorder = DispatchRecorder()
        KERNEL_CALLS[0] = 0
        with torch.no_grad():
            try:
                fn = watched(model_new, recorder)
                for seed in seeds[:job.warmup]:  # this process's own warm-up: nothing here is measured
                    out = fn(*draw(seed))
                    del out
                backend.synchronize()
                backend.warm_device(job.warm_device_ms)
                # every timed call is clocked by the harness in the verifier's process and watched here by both
                # monitors, as a trial is (verifier/execute/harness.py: the inputs, outputs, clock and picks live there)
                clocked = BracketClient(ch, job.backend, lambda: draw(seeds[0]))
                own_in_profile = 0
                if backend.name == "cuda":  # the profiler's device view of every timed call (no device time cost)
                    with profiled(backend) as prof:
                        _brackets(clocked, "candidate", fn, job.n_brackets)
                    backend.synchronize()
                    own_in_profile = read_profile(prof, cuda_kernels, timed, registry[0].calls)
                else:  # on cpu its host cost would be the candidate's alone: the dispatch monitor watches these calls
                    _brackets(clocked, "candidate", fn, job.n_brackets)
                timed.kernel_calls = KERNEL_CALLS[0] + max(registry[0].calls(recorder.ops), own_in_profile)
                timed.dispatched_ops = sorted(set(recorder.ops))
                timed.to_host_bytes = recorder.to_host_bytes
                if recorder.removed:
                    timed.monitor_problems.append("the dispatch monitor was removed during a timed forward")
                ch.record("timed", timed.to_dict())
                n = _probe_count(backend, model_new, draw, seeds, job.gap_probes)
                report.candidate = ModelTiming()
                report.candidate.launch_us, report.candidate.idle_gap_us = probe_calls(backend, model_new, seeds,
                                                                                      draw, n)
            except Exception:  # noqa: BLE001
                report.timing_error = traceback.format_exc(limit=3)[-2500:]
        # the candidate's threads as the last timed call (or probe) returned, judged as after a trial
        report.threads_added_timing = side_work_threads(threads_beside(tids0), tids0)
        clock.phase("timing")
        guard.tampered("timing")
    lock.close()
    return report


def main(job_dir: str) -> int:
    job_dir_p = Path(job_dir)
    report = run_job(job_dir_p)
    # written last, atomically: a crash before this point leaves no report, which the parent reports
    report.write(job_dir_p)
    return 0


if __name__ == "__main__":
    # --serve PROCS_MAX: a fork server (verifier/child/forkserver.py; [verify] sandbox_procs bounds a sandboxed job's
    # processes) whose forked children run main; else one job
    if sys.argv[1] == "--serve":
        from verifier.child.forkserver import serve  # here: a one-job process does not import the server

        sys.exit(serve(int(sys.argv[2]), main))
    sys.exit(main(sys.argv[1]))
