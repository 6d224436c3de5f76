"""Stages 4-6 inside the execution child: one process per candidate, started by verifier/api.py as
``python -m verifier.worker JOB_DIR``.

The child reads ``JOB_DIR/job.json`` and ``JOB_DIR/trial_<i>.pt`` (inputs drawn by the verifier
process from seeds this process never sees), runs ModelNew on every trial while recording the aten
ops it dispatches, how often the candidate's own kernel functions were called, thread counts, input
mutation and output types, then times candidate, eager reference and torch.compile'd reference
(fresh inputs every iteration, cache flushed between iterations), and writes ``JOB_DIR/result.pt``
(tensors and plain data only; the verifier loads it with ``weights_only=True``).

What this process does NOT decide: whether outputs are correct. The reference outputs of the
correctness trials are computed in the verifier process and never enter this one; the verifier
compares. A crash, hang or memory blow-up of this process is turned into a verdict by the parent.

Imports: torch and the standard library only.
"""

from __future__ import annotations

import builtins
import ctypes
import importlib.machinery
import importlib.util
import json
import os
import resource
import sys
import threading
import time
import traceback
import types
from pathlib import Path

import torch
import torch.utils.cpp_extension as cpp_extension
from torch.utils._python_dispatch import TorchDispatchMode

from verifier.backends import get_backend, kernel_names_in
from verifier.devlock import device_lock
from verifier.build import canonical_spec, extension_name, spec_key

# aten ops that allocate, view, copy or describe: the only ones ModelNew.forward may dispatch.
ALLOWED_ATEN = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "ones",
    "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "fill_", "zero_", "view", "_unsafe_view",
    "reshape", "_reshape_alias", "as_strided", "expand", "expand_as", "permute", "transpose", "t", "unsqueeze",
    "squeeze", "flatten", "unflatten", "select", "slice", "narrow", "split", "split_with_sizes", "chunk", "unbind",
    "alias", "detach", "clone", "copy_", "_to_copy", "to", "contiguous", "lift_fresh", "lift_fresh_copy",
    "_local_scalar_dense", "resize_", "view_as", "is_same_size", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "numel", "dim", "record_stream", "item", "_has_compatible_shallow_copy_type",
}


class DispatchRecorder(TorchDispatchMode):
    """Records every aten op dispatched while active (Python calls and at:: calls from C++ alike)."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        self.ops.append(f"{func.namespace}::{func.overloadpacket.__name__}")
        return func(*args, **(kwargs or {}))


KERNEL_CALLS = [0]


class CountedExtension(types.ModuleType):
    """The prebuilt extension as the candidate sees it: every exported function counts its calls."""

    def __init__(self, mod):
        super().__init__(mod.__name__)
        self.__dict__["_km_mod"] = mod

    def __getattr__(self, name):
        attr = getattr(self.__dict__["_km_mod"], name)
        if callable(attr) and not name.startswith("__"):
            def counted(*a, **k):
                KERNEL_CALLS[0] += 1
                return attr(*a, **k)
            return counted
        return attr


def _load_so(name: str, path: str):
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def make_prebuilt_load_inline(build_root: str, allow_compile: bool, cuda_kernel_names: list[str]):
    """A load_inline that returns the module the compile pool built for the same spec; compiling here
    only for specs the static stage could not resolve (when allowed), into the same keyed directory."""
    original = cpp_extension.load_inline

    def load_inline(name, cpp_sources=None, cuda_sources=None, functions=None, **kw):
        args = dict(kw, cpp_sources=cpp_sources, cuda_sources=cuda_sources, functions=functions)
        key = spec_key(args)
        cuda_kernel_names.extend(kernel_names_in(canonical_spec(args)["cuda_sources"]))
        key_dir = Path(build_root) / key
        res = key_dir / "result.json"
        if res.is_file():
            d = json.loads(res.read_text())
            if not d["ok"]:
                raise RuntimeError("extension failed to compile (see the compile stage)")
            return CountedExtension(_load_so(extension_name(key), d["so_path"]))
        if not allow_compile:
            raise RuntimeError("extension was not built by the compile pool and in-child compilation is off")
        key_dir.mkdir(parents=True, exist_ok=True)
        spec = canonical_spec(args)
        mod = original(name=extension_name(key), build_directory=str(key_dir),
                       **{k: (v or None) if k in ("cuda_sources", "functions") else v for k, v in spec.items()})
        return CountedExtension(mod)

    return load_inline


def _apply_limits(job: dict) -> dict:
    info = {}
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if job["backend"] == "cpu" and job.get("memory_limit_gb"):
        lim = int(job["memory_limit_gb"] * 2**30)
        try:
            resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
            info["address_space_gb"] = job["memory_limit_gb"]
        except (ValueError, OSError) as e:
            info["address_space_gb"] = f"not set: {e}"
    try:  # a private network namespace: no network at all (needs root or user namespaces)
        libc = ctypes.CDLL(None, use_errno=True)
        info["network"] = "isolated" if libc.unshare(0x40000000) == 0 else "not isolated (unshare refused)"
    except Exception as e:  # noqa: BLE001
        info["network"] = f"not isolated ({e})"
    return info


def _guarded() -> dict:
    """Functions whose identity the checks rely on, as they are bound now (called once before the
    candidate is imported, and again after each phase to see what it replaced)."""
    return {"torch.cuda.synchronize": torch.cuda.synchronize, "torch.cuda.Event": torch.cuda.Event,
            "torch.manual_seed": torch.manual_seed, "torch.randn": torch.randn, "torch.rand": torch.rand,
            "torch.allclose": torch.allclose, "torch.equal": torch.equal, "torch.save": torch.save,
            "torch.Tensor.clone": torch.Tensor.clone, "torch.Tensor.copy_": torch.Tensor.copy_,
            "torch.Tensor.cpu": torch.Tensor.cpu, "time.perf_counter": time.perf_counter,
            "builtins.print": builtins.print, "builtins.isinstance": builtins.isinstance,
            "builtins.type": builtins.type, "torch.nn.Module.__call__": torch.nn.Module.__call__}


def _unwrap(fn):
    # torch itself may wrap some of these later (dynamo wraps torch.manual_seed with functools.wraps)
    for _ in range(8):
        inner = getattr(fn, "__wrapped__", None)
        if inner is None:
            return fn
        fn = inner
    return fn


def _patched(original: dict) -> list[str]:
    now = _guarded()
    return [k for k, fn in original.items() if _unwrap(now.get(k)) is not _unwrap(fn)]


def _short_traceback() -> str:
    """The candidate-side frames and the exception line, not the verifier's own frames."""
    etype, exc, tb = sys.exc_info()
    frames = [f for f in traceback.extract_tb(tb) if "site-packages/torch" not in f.filename
              and "verifier/worker.py" not in f.filename]
    text = "".join(traceback.format_list(frames[-3:])) + "".join(traceback.format_exception_only(etype, exc))
    return text[-2500:]


def _exec_module(name: str, code: str, filename: str):
    mod = types.ModuleType(name)
    mod.__file__ = filename
    sys.modules[name] = mod
    exec(compile(code, filename, "exec", dont_inherit=True), mod.__dict__)
    return mod


def _to_device(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_device(o, device) for o in obj)
    return obj


def _clone(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, (list, tuple)):
        return type(obj)(_clone(o) for o in obj)
    return obj


def _tensors(obj) -> list:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    return []


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


def _plain_cpu(out):
    if isinstance(out, torch.Tensor):
        return out.detach().to("cpu").clone()
    return [_plain_cpu(t) for t in out]


def _os_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _draw_inputs(seed: int, get_inputs, device):
    """Fresh inputs for one timed call: drawn on the device (fast), as the verifier redraws them from the seed."""
    torch.manual_seed(seed)
    with torch.device(device):
        return _to_device(get_inputs(), device)


def _nbytes(obj) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(obj))


def _keep_budget(device: str) -> int:
    """Bytes of timed outputs that may stay on the device during a timing phase."""
    if device != "cuda":
        return 0
    free, _ = torch.cuda.mem_get_info()
    return min(int(free * 0.25), 4 << 30)


def _time_model(backend, fn, seeds: list[int], get_inputs, device, warmup: int, keep_outputs: bool):
    """Median-ready per-iteration times of fn on fresh inputs drawn with each seed (same for every model).

    Kept outputs are copied on the device while a budget lasts and brought to the host after the loop: a
    device-to-host copy between timed calls leaves the GPU idle for milliseconds, its clocks drop, and the
    model whose outputs are kept (the candidate) would be timed at lower clocks than the references."""
    times, walls, outs = [], [], []
    budget = _keep_budget(device) if keep_outputs else 0
    warm = seeds[:warmup]  # may be shorter than warmup: outs[j] must stay the output of seeds[j]
    for i, seed in enumerate(warm + seeds):
        inputs = _draw_inputs(seed, get_inputs, device)
        backend.flush_cache()
        backend.synchronize()
        out, us, wall = backend.time_call(lambda: fn(*inputs))
        if i >= len(warm):
            times.append(us)
            walls.append(wall)
            if keep_outputs:
                size = _nbytes(out)
                if 0 < size <= budget:
                    budget -= size
                    outs.append(_clone(out))
                else:
                    outs.append(_plain_cpu(out))
        del out, inputs
    return times, walls, [_plain_cpu(o) for o in outs]


def _gap_probe(backend, cand, ref_model, seeds, get_inputs, device, n: int) -> dict:
    """Idle-minus-end gaps (see CudaBackend.time_call) of candidate and reference, interleaved call by call
    so that both see the same host load: the C09 check compares their smallest gaps."""
    gaps: dict = {"candidate": [], "eager": []}
    for i in range(n):
        for name, fn in (("candidate", cand), ("eager", ref_model)):
            inputs = _draw_inputs(seeds[i % len(seeds)], get_inputs, device)
            backend.synchronize()
            out, us, idle_us = backend.time_call(lambda: fn(*inputs))
            gaps[name].append(idle_us - us)
            del out, inputs
    return gaps


def run_job(job_dir: Path) -> dict:
    job = json.loads((job_dir / "job.json").read_text())
    result: dict = {"sandbox": _apply_limits(job), "trials": [], "events": [], "phase_s": {}}
    clock = [time.perf_counter()]

    def phase(name: str) -> None:
        now = time.perf_counter()
        result["phase_s"][name] = round(now - clock[0], 4)
        clock[0] = now

    backend = get_backend(job["backend"])
    device = backend.device
    if hasattr(backend, "hide_launch_us"):
        backend.hide_launch_us = float(job.get("hide_launch_us", 0.0))
    original = _guarded()
    cuda_kernels: list[str] = []
    cpp_extension.load_inline = make_prebuilt_load_inline(job["build_root"], job.get("allow_child_compile", True),
                                                          cuda_kernels)
    torch.utils.cpp_extension.load_inline = cpp_extension.load_inline

    # shared while this process works on the device (cuda only: see api._shared_lock), exclusive while it
    # times (verifier/devlock.py)
    lock = device_lock(job.get("timing_lock"))
    lock_wait = float(job.get("lock_wait_s", 30.0))
    if job["backend"] == "cuda":
        lock.acquire(False, lock_wait)
    ref = _exec_module("km_reference", job["reference_code"], "reference.py")
    threads_py0, threads_os0 = threading.active_count(), _os_threads()
    try:
        cand = _exec_module("km_candidate", job["candidate_code"], "candidate.py")
    except Exception:  # noqa: BLE001
        result["import_error"] = traceback.format_exc(limit=4)[-3000:]
        return result
    result["patched_after_import"] = _patched(original)
    init = ref.get_init_inputs()
    torch.manual_seed(job["init_seed"])
    model = ref.Model(*init).to(device).eval()
    torch.manual_seed(job["init_seed"])
    try:
        model_new = cand.ModelNew(*init).to(device).eval()
    except Exception:  # noqa: BLE001
        result["init_error"] = traceback.format_exc(limit=4)[-3000:]
        return result
    sd_ref, sd_new = model.state_dict(), model_new.state_dict()
    if sd_ref and list(sd_ref) == list(sd_new) and all(sd_ref[k].shape == sd_new[k].shape for k in sd_ref):
        model_new.load_state_dict(sd_ref)
        result["copied_parameters"] = True
    result["holds_reference_model"] = any(isinstance(m, ref.Model) for m in model_new.modules())
    phase("load")

    # ---- correctness trials (reference order alternates; its outputs here are only for C11 checks)
    for i in range(job["n_trials"]):
        trial = torch.load(job_dir / f"trial_{i}.pt", weights_only=True)
        inputs = _to_device(trial["inputs"], device)
        pristine = _clone(inputs)
        rec: dict = {"index": i, "started_s": round(time.perf_counter() - clock[0], 4)}
        ref_out_here = None
        ref_first = i % 2 == 1
        with torch.no_grad():
            if ref_first:
                ref_out_here = _plain_cpu(model(*_clone(inputs)))
            backend.synchronize()
            out_bytes = _nbytes(inputs) * 2
            backend.poison_free_memory(out_bytes)
            KERNEL_CALLS[0] = 0
            py0, os0 = threading.active_count(), _os_threads()
            recorder = DispatchRecorder()
            try:
                with recorder:
                    out = model_new(*inputs)
                backend.synchronize()
            except Exception:  # noqa: BLE001
                rec["error"] = _short_traceback()
                result["trials"].append(rec)
                break
            rec["threads_added"] = max(threading.active_count() - py0, _os_threads() - os0, 0)
            rec["kernel_calls"] = KERNEL_CALLS[0]
            rec["ops"] = sorted(set(recorder.ops))
            rec["forbidden_ops"] = sorted({o for o in recorder.ops if o.split("::")[-1] not in ALLOWED_ATEN})
            rec["mutated_inputs"] = [j for j, (a, b) in enumerate(zip(_tensors(inputs), _tensors(pristine)))
                                     if not torch.equal(a, b)]
            rec["output_problem"] = _output_problem(out, device)
            if not rec["output_problem"]:
                rec["output"] = _plain_cpu(out)
            del out
            if not ref_first:
                ref_out_here = _plain_cpu(model(*_clone(pristine)))
            rec["ref_output_here"] = ref_out_here
        result["trials"].append(rec)
    result["patched_after_trials"] = _patched(original)
    phase("trials")
    ok_trials = result["trials"] and all("error" not in t and not t["output_problem"] for t in result["trials"])
    result["cuda_kernel_names"] = cuda_kernels
    timing = ok_trials and job.get("timing_trials", 0) > 0
    if timing:
        # one timing phase at a time per build root, and no other process's device work meanwhile
        result["timing_exclusive"] = lock.acquire(True, lock_wait)
        result["lock_wait_s"] = round(lock.waited_s, 4)
        if not result["timing_exclusive"]:
            result["events"].append(f"timing ran without the device to itself: the lock was not free within "
                                    f"{lock_wait:.0f} s")
        phase("timing_lock_wait")
        _run_timing(job, result, backend, model_new, model, ref, device, original)
        phase("timing")
    # the profiler pass of the own-kernel check comes after timing, so nothing it leaves behind (CUPTI
    # state, a lower clock after its synchronisations) can reach the timed calls
    if ok_trials and cuda_kernels:
        trial = torch.load(job_dir / "trial_0.pt", weights_only=True)
        inputs = _to_device(trial["inputs"], device)
        with torch.no_grad():
            result["own_kernel_ran"] = backend.own_kernel_ran(lambda: model_new(*inputs), cuda_kernels)
        phase("own_kernel_check")
    lock.close()
    result["threads_python_at_start"] = threads_py0
    result["threads_os_at_start"] = threads_os0
    return result


def _run_timing(job, result, backend, model_new, model, ref, device, original) -> None:
    """Candidate first (its timed outputs go back to be judged), then the eager reference, the gap probes
    and torch.compile of the reference, all on the same fresh inputs per iteration."""
    seeds = job["timing_seeds"]
    py0, os0 = threading.active_count(), _os_threads()
    with torch.no_grad():
        try:
            backend.warm_device(job.get("warm_device_ms", 0.0))
            t, w, outs = _time_model(backend, model_new, seeds, ref.get_inputs, device, job["warmup"], True)
            result["timing"] = {"candidate_us": t, "candidate_wall_us": w}
            result["timed_outputs"] = outs
            result["threads_added_timing"] = max(threading.active_count() - py0, _os_threads() - os0, 0)
            result["patched_after_timing"] = _patched(original)
            backend.warm_device(job.get("warm_device_ms", 0.0))
            t, w, _ = _time_model(backend, model, seeds, ref.get_inputs, device, job["warmup"], False)
            result["timing"]["eager_us"] = t
            result["timing"]["eager_wall_us"] = w
            if job["backend"] == "cuda" and job.get("gap_probes", 0) > 0:
                result["timing"]["gap_probe"] = _gap_probe(backend, model_new, model, seeds, ref.get_inputs,
                                                           device, job["gap_probes"])
            if job.get("time_torch_compile"):
                try:
                    compiled = torch.compile(model)
                    t, w, _ = _time_model(backend, compiled, seeds, ref.get_inputs, device,
                                          max(job["warmup"], 2), False)
                    result["timing"]["compile_us"] = t
                except Exception as e:  # noqa: BLE001
                    result["events"].append(f"torch.compile of the reference failed: {str(e)[:300]}")
        except Exception:  # noqa: BLE001
            result["timing_error"] = traceback.format_exc(limit=3)[-2500:]


def _run_forked(job_dir: str) -> None:
    """Body of a forked child: own session, output to the job's log, result file, then _exit."""
    code = 1
    try:
        os.setsid()
        log = os.open(os.path.join(job_dir, "child.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(devnull)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        os.chdir(job_dir)
        code = main(job_dir)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve() -> int:
    """A fork server: torch is imported once here, and every job runs in a fresh forked child.

    Protocol on stdin/stdout (never visible to a child, whose fds 0-2 are replaced):
    ``JOB_DIR<TAB>TIMEOUT_S`` in, ``RC<TAB>TIMED_OUT`` out. The server never runs torch ops itself, so
    forking is safe; a child that outlives its timeout is killed with its whole process group."""
    if os.environ.get("KM_CPU_PERTURB"):
        libc = ctypes.CDLL(None)
        libc.mallopt(-6, int(os.environ["KM_CPU_PERTURB"]))  # M_PERTURB
        libc.mallopt(-3, 32 * 1024 * 1024)  # M_MMAP_THRESHOLD: poisoned heap rather than fresh zero pages
    import signal

    for line in sys.stdin:
        job_dir, _, timeout = line.rstrip("\n").partition("\t")
        pid = os.fork()
        if pid == 0:
            _run_forked(job_dir)
        deadline = time.monotonic() + float(timeout or 120)
        timed_out, status = False, 0
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                timed_out = True
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                break
            time.sleep(0.005)
        try:  # leftovers of the child's session (a forked grandchild)
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        rc = os.waitstatus_to_exitcode(status)
        sys.stdout.write(f"{rc}\t{int(timed_out)}\n")
        sys.stdout.flush()
    return 0


def wait_for_job() -> int:
    """A single-use execution process started before its candidate exists (the cuda backend's warm pool):
    torch is imported and the device initialised while earlier candidates run, then ONE job dir is read
    from stdin and run exactly as a freshly spawned ``python -m verifier.worker JOB_DIR`` would run it, and
    the process exits. Nothing of a candidate ever outlives its process.

    The network namespace is made private first, in the same order as a fresh child (isolation, then
    CUDA); a failed warm-up is reported in the job's log and the job still runs (initialising lazily)."""
    started = time.perf_counter()
    notes = []
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.unshare(0x40000000)
    except Exception as e:  # noqa: BLE001
        notes.append(f"network isolation before warm-up failed: {e}")
    try:
        if os.environ.get("KM_WARM_BACKEND", "cuda") == "cuda" and torch.cuda.is_available():
            torch.empty(1, device="cuda")  # the CUDA context, created before the job arrives
        import torch._dynamo  # noqa: F401  (imported lazily by the first torch.compile / disable wrapper: ~3 s)
    except Exception:  # noqa: BLE001
        notes.append("warm-up failed:\n" + traceback.format_exc(limit=3))
    warm_s = time.perf_counter() - started
    line = sys.stdin.readline().strip()
    if not line:
        return 0
    log = os.open(os.path.join(line, "child.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.chdir(line)
    print(f"[verifier] warm execution process ready in {warm_s:.2f} s before this job", *notes, sep="\n", flush=True)
    rc = main(line)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # the result file is complete; skip the interpreter's teardown (~1 s with torch loaded)


def main(job_dir: str) -> int:
    job_dir_p = Path(job_dir)
    result = run_job(job_dir_p)
    # written last, atomically: a crash before this point leaves no result, which the parent reports
    tmp = job_dir_p / "result.pt.tmp"
    torch.save(result, tmp)
    os.replace(tmp, job_dir_p / "result.pt")
    return 0


if __name__ == "__main__":
    sys.exit(serve() if sys.argv[1] == "--serve" else wait_for_job() if sys.argv[1] == "--wait" else main(sys.argv[1]))
