"""The annotation worker: runs a KernelBench program's forward once under an op recorder.

What the worker guarantees (the parent, synth/annotate/annotator.py, turns the trace into annotations):
- No real data by default. ``get_init_inputs()``, the ``Model`` constructor, ``get_inputs()`` and ``forward`` all
  run under torch's ``FakeTensorMode``: every tensor has a shape, dtype and device but no storage, so a 4096 x
  393216 input or a model with billions of weights costs no memory and no arithmetic. The recorded aten ops are
  the ones a real cpu run dispatches (decompositions happen above the mode, so they are the same), hence the same
  shapes, FLOPs and bytes (tests/test_annotate.py checks fake against real on small programs).
- Device placement is taken off the program. KernelBench programs build inputs with ``.cuda()`` or
  ``device="cuda"``; there may be no GPU here, and the annotation does not depend on the device. A
  ``TorchFunctionMode`` maps every non-cpu device a program asks for to cpu (``Tensor.cuda()``,
  ``Tensor.to("cuda")``, ``device=`` keywords, ``Module.cuda()`` through them) and records what was asked
  (``requested_devices`` in the trace). Programs that call the CUDA runtime themselves
  (``torch.cuda.current_device()``, streams) are not rescued: they fail with torch's own message.
- A real run only when fake tensors cannot answer. Data-dependent programs (``.item()``, ``nonzero``, Python
  branches on values) and ops without a fake implementation raise under fake tensors; such a program is run again
  with real tensors, inside an address-space budget (``real_budget_gb`` over what the worker already maps, via
  RLIMIT_AS), so a huge program fails with a clear "over budget" reason instead of filling the machine. An error
  raised by the program's own code (its innermost frame in ``<reference>``) is reported as is, without a second
  run. ``traced_with`` in the trace says which run produced it.
- Module-level code runs for real, once, outside the fake mode (imports must not cache fake tensors in library
  globals). Hugging Face Hub access is switched to offline mode (``HF_HUB_OFFLINE``) unless the caller's
  environment says otherwise: a program that needs a model from the Hub fails fast instead of retrying the network
  for a minute.

Not protected against: code that reads or writes files, uses the network or spawns processes of its own; a program
that hangs or crashes is handled by the parent (timeout, worker replaced).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Any

# torch is imported inside the functions that run in the worker: the parent imports this module for
# TraceWorker (annotator.py, hence the CLI) and stays free of torch (about 2 s to import).

# queries of tensor metadata: dispatched for fake tensors (a tensor subclass), never kernels
METADATA_OPS = frozenset("sym_size sym_stride sym_numel sym_storage_offset is_contiguous dim size stride numel "
                         "is_strides_like_format is_non_overlapping_and_dense".split())
NON_CPU_DEVICES = ("cuda", "hip", "mps", "xpu", "musa", "npu")


def _cpu_device(d, seen: set):
    """``d`` with any accelerator device replaced by cpu (the original type noted in ``seen``)."""
    import torch

    if isinstance(d, torch.device) and d.type in NON_CPU_DEVICES:
        seen.add(d.type)
        return torch.device("cpu")
    if isinstance(d, str) and d.split(":")[0] in NON_CPU_DEVICES:
        seen.add(d.split(":")[0])
        return "cpu"
    if isinstance(d, int) and not isinstance(d, bool):  # device=0 means cuda:0
        seen.add("cuda")
        return "cpu"
    return d


def _device_mode():
    """A TorchFunctionMode that keeps every tensor on the cpu (see the module docstring)."""
    import torch
    from torch.overrides import TorchFunctionMode

    class DeviceToCpu(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.seen: set = set()

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func is torch.Tensor.cuda:
                self.seen.add("cuda")
                return args[0]
            if "device" in kwargs:
                kwargs["device"] = _cpu_device(kwargs["device"], self.seen)
            if func is torch.Tensor.to:
                args = (args[0],) + tuple(_cpu_device(a, self.seen) if not isinstance(a, torch.Tensor) else a
                                          for a in args[1:])
            return func(*args, **kwargs)

    return DeviceToCpu()


def _recorder(records: list):
    """A TorchDispatchMode that appends (str(op), packet name, input specs, output specs, extra)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = func._overloadpacket.__name__
            if func.namespace == "prim" or name in METADATA_OPS:
                return out  # fake tensors dispatch metadata queries (x.device) that a real run does not
            ins = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
            # empty outputs carry nothing; fake kernels return some that real ones leave undefined
            # (mkldnn_rnn_layer's workspace), and dropping them keeps fake and real traces equal
            outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.numel() > 0]
            extra = {}
            if "convolution" in name:
                extra = {"transposed": bool(args[6]) if len(args) > 6 else False,
                         "groups": int(args[8]) if len(args) > 8 else 1,
                         "has_bias": len(args) > 2 and args[2] is not None}
            elif "pool" in name and len(args) > 1:
                extra = {"kernel_size": list(args[1]) if isinstance(args[1], (list, tuple)) else args[1]}
            records.append((str(func), name, [_spec(t) for t in ins], [_spec(t) for t in outs], extra))
            return out

    return Recorder()


def _fake_module_apply(self, fn, recurse=True):
    """``nn.Module._apply`` for fake parameters: replace each converted parameter and buffer.

    Stock ``_apply`` swaps a fake parameter in place with ``swap_tensors``, which fails under
    ``FakeTensorMode`` (its memo holds weakrefs), so ``.cuda()``, ``.half()`` and ``.to()`` on a
    module would break every program that uses them. Replacing the Parameter object is what
    ``_apply`` itself does when in-place conversion is impossible; identity does not matter here."""
    import torch

    if recurse:
        for m in self.children():
            m._apply(fn)
    for key, p in self._parameters.items():
        if p is not None:
            with torch.no_grad():
                new = fn(p)
            if new is not p:
                self._parameters[key] = torch.nn.Parameter(new, p.requires_grad)
    for key, b in self._buffers.items():
        if b is not None:
            self._buffers[key] = fn(b)
    return self


def _spec(t) -> list:
    return [list(t.shape), str(t.dtype).removeprefix("torch.")]


def _plain(x) -> bool:
    if isinstance(x, (list, tuple)):
        return all(_plain(v) for v in x)
    if isinstance(x, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in x.items())
    return x is None or isinstance(x, (bool, int, float, str))


def _run_once(ns: dict, seed: int, fake: bool) -> dict:
    """Build the model and inputs and run forward once under the recorder; plain data out."""
    import torch
    from torch.utils._pytree import tree_flatten

    records: list = []
    devices = _device_mode()
    with contextlib.ExitStack() as stack:
        if fake:
            from torch._subclasses.fake_tensor import FakeTensorMode

            # allow_non_fake_inputs: tensors made by module-level code are real and join in as constants
            stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
            stack.enter_context(_patched(torch.nn.Module, "_apply", _fake_module_apply))
        stack.enter_context(devices)
        torch.manual_seed(seed)
        init = ns["get_init_inputs"]()
        model = ns["Model"](*init)
        inputs = list(ns["get_inputs"]())
        with torch.no_grad(), _recorder(records):
            out = model(*inputs)
    try:
        names = [p for p in inspect.signature(model.forward).parameters]
    except (TypeError, ValueError):
        names = []
    outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
    if not outs:
        raise TypeError(f"forward returned no tensor ({type(out).__name__})")
    seen, weights = set(), []
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            weights.append(_spec(t) + [t.element_size()])
    in_specs = []
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            nm = names[i] if i < len(names) and names[i] not in ("args", "kwargs") else f"input{i}"
            in_specs.append([nm] + _spec(x) + [x.element_size()])
    try:
        init_repr = repr(init) if _plain(init) else ""
    except Exception:
        init_repr = ""
    return {"records": records, "inputs": in_specs, "weights": weights,
            "outputs": [[f"output{i}"] + _spec(o) + [o.element_size()] for i, o in enumerate(outs)],
            "init_inputs": init_repr, "traced_with": "fake" if fake else "real",
            "requested_devices": sorted(devices.seen)}


@contextlib.contextmanager
def _patched(owner, name: str, value):
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def _raised_by_program(e: BaseException) -> bool:
    """True when the innermost frame of ``e``'s traceback is the program's own code."""
    tb, last = e.__traceback__, None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    return last == "<reference>"


def _vm_size_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def _run_real_within(ns: dict, seed: int, budget_gb: float) -> dict:
    """``_run_once`` with real tensors, allowed ``budget_gb`` of address space over the current size.

    The soft RLIMIT_AS is lowered for the run and restored afterwards; allocations past it fail
    with torch's "can't allocate memory", which the caller reports as over budget."""
    try:
        import resource
    except ImportError:  # not on Linux: no budget, the parent's timeout still applies
        return _run_once(ns, seed, fake=False)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _vm_size_bytes() + int(budget_gb * 2**30)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        return _run_once(ns, seed, fake=False)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def trace_program(code: str, seed: int = 0, *, mode: str = "auto", real_budget_gb: float = 2.0) -> dict:
    """Run a KernelBench program once under the op recorder; plain data out (see the module docstring).

    ``mode``: "fake" (fake tensors only), "real" (real tensors only, no budget), "auto" (fake, then
    real within ``real_budget_gb`` when fake tensors cannot run it). Raises the program's error."""
    ns: dict[str, Any] = {"__name__": "kernelmill_task"}
    exec(compile(code, "<reference>", "exec", dont_inherit=True), ns)
    if mode == "real":
        return _run_once(ns, seed, fake=False)
    try:
        return _run_once(ns, seed, fake=True)
    except Exception as e:
        if mode == "fake" or _raised_by_program(e) or real_budget_gb <= 0:
            raise
        fake_error = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    try:
        trace = _run_real_within(ns, seed, real_budget_gb)
    except (MemoryError, RuntimeError) as e:
        if isinstance(e, MemoryError) or "allocate" in str(e) or "out of memory" in str(e).lower():
            raise MemoryError(f"fake tensors cannot run it ({fake_error}) and a real run needs more than "
                              f"{real_budget_gb:g} GiB") from None
        raise
    trace["fake_error"] = fake_error
    return trace


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this worker when the thread that started it dies (a killed load must
    not leave workers running a 60 s program); elsewhere the worker exits at its next read instead."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if parent_pid and os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(0)


def worker_main() -> None:
    """Worker entry point: framed pickles on stdin/stdout, one (task_id, code, seed, options) at a time.

    Replies ("ok", trace) or ("error", message). The program's own prints go to stderr (the
    protocol keeps a private copy of stdout)."""
    memory_limit_gb = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    _die_with_parent(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    if memory_limit_gb > 0:
        try:
            import resource

            lim = int(memory_limit_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
        except (ImportError, ValueError, OSError):
            pass
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    recv, send = Connection(os.dup(0), writable=False), Connection(out_fd, readable=False)
    # imported and warmed up before "ready" so the first task's timeout excludes them: the first
    # fake-tensor op loads torch's decomposition tables (several seconds on a busy 2-core machine)
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        torch.nn.functional.linear(torch.ones(2, 3), torch.ones(4, 3)).relu().sum()

    send.send(("ready", None))
    while True:
        try:
            msg = recv.recv()
        except EOFError:
            return
        if msg is None:
            return
        _task_id, code, seed, options = msg
        try:
            send.send(("ok", trace_program(code, seed, **options)))
        except BaseException as e:  # the program's own failure is data for the parent
            tb = e.__traceback__
            where = ""
            while tb is not None:
                if tb.tb_frame.f_code.co_filename == "<reference>":
                    where = f" (reference line {tb.tb_lineno})"
                tb = tb.tb_next
            send.send(("error", f"{type(e).__name__}: {str(e)[:300]}{where}"))


class TraceWorker:
    """One worker process serving many tasks; replaced after a timeout or a crash."""

    def __init__(self, memory_limit_gb: float = 16.0, start_timeout_s: float = 120.0, *,
                 mode: str = "auto", real_budget_gb: float = 2.0):
        self.memory_limit_gb = memory_limit_gb
        self.start_timeout_s = start_timeout_s
        self.options = {"mode": mode, "real_budget_gb": real_budget_gb}
        self.proc = None
        self.send_conn = self.recv_conn = None

    def _start(self) -> None:
        from kernelmill.config import REPO_ROOT  # here, not at the top: the worker process stays off the settings

        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        # a program that needs the Hub fails in a second, not after a minute of retries (caller may override)
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("TRANSFORMERS_OFFLINE", "1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from synth.annotate.trace_worker import worker_main; worker_main()",
             str(self.memory_limit_gb), str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=str(REPO_ROOT))
        self.send_conn = Connection(os.dup(self.proc.stdin.fileno()), readable=False)
        self.recv_conn = Connection(os.dup(self.proc.stdout.fileno()), writable=False)
        self.proc.stdin.close()
        self.proc.stdout.close()
        try:
            ready = self.recv_conn.poll(self.start_timeout_s)
            if ready:
                self.recv_conn.recv()
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.close()
            raise RuntimeError(f"annotation worker did not start within {self.start_timeout_s:.0f} s")

    def kill(self) -> None:
        """Kill the process now (from any thread); a ``run`` waiting on it returns a crash."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.send_conn.send(None)
            except OSError:
                pass
            try:
                self.proc.wait(timeout=2)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        for c in (self.send_conn, self.recv_conn):
            try:
                c.close()
            except OSError:
                pass
        self.proc = self.send_conn = self.recv_conn = None

    def run(self, task_id: str, code: str, timeout_s: float, seed: int = 0) -> tuple[str, Any]:
        """("ok", trace) or ("error", reason); never raises for the program's faults."""
        if self.proc is None or self.proc.poll() is not None:
            self.close()
            self._start()
        try:
            self.send_conn.send((task_id, code, seed, self.options))
            if not self.recv_conn.poll(timeout_s):
                self.proc.kill()
                self.close()
                return "error", f"timeout: no result after {timeout_s:g} s"
            return self.recv_conn.recv()
        except (EOFError, OSError):
            try:
                rc = self.proc.wait(timeout=5)
            except Exception:
                self.proc.kill()
                rc = self.proc.wait()
            self.close()
            return "error", f"worker crashed (exit code {rc}) while running the reference"
