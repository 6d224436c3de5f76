"""Annotate every task, whatever its source, and order tasks as a curriculum.

``annotate_tasks`` runs each task's reference program once, in a worker process, under a
``TorchDispatchMode`` that records every aten op dispatched by ``Model.forward`` with its input
and output shapes and dtypes. From that trace it fills the Task fields:

- ``input_specs`` / ``output_specs``: name (forward's parameter names; ``output<i>``), shape, dtype
  of each tensor argument and each tensor in the output.
- ``op_histogram``: aten op -> count (``aten.mm``, ``aten.convolution``, ...), leaving out ops that
  launch no kernel (views, aliases, shape queries; the ``VIEW_OPS`` set).
- ``flops``: the sum over dispatched ops of the FLOP table below.
- ``bytes_moved``: bytes of the forward's tensor inputs + the model's parameters and buffers + the
  output tensors, each tensor counted once. This is the least traffic any implementation needs
  (read everything once, write the result once); intermediates are assumed to stay on chip.
- ``floor_time_us``: roofline floor on a named device (synth/devices.py):
  ``max(flops / peak[dtype], bytes_moved / bandwidth)``, with dtype the dtype of the largest
  floating-point input, parameter or buffer.
- ``level`` and ``difficulty``: the rule below. A task that arrived with a level (a KernelBench
  ``levelN`` folder) keeps it; the rule's level is always in ``annotations["rule_level"]``.
- ``annotations``: per-op trace (``ops``: op, input/output shapes and dtypes, FLOPs; first
  ``MAX_TRACED_OPS`` ops), counts, device spec, floor dtype, bound (compute/memory), rule names,
  and the ops counted by the table's default rule (``default_flop_ops``: 1 FLOP per output element).

FLOP table (FLOP_RULES = "kernelmill-flops-v1"), per aten op family:
    mm: 2*M*N*K        addmm: 2*M*N*K + M*N      bmm: 2*B*M*N*K     baddbmm: 2*B*M*N*K + B*M*N
    mv: 2*M*K          dot/vdot: 2*K
    convolution: 2 * N*Cout*prod(out spatial) * (Cin/groups) * prod(kernel), + N*Cout*prod(out) with bias
                 (transposed: 2 * N*Cin*prod(in spatial) * (Cout/groups) * prod(kernel))
    softmax, log_softmax: 5 per element      layer/group/rms norm: 5 per element
    batch norm: 4 per element                reductions (sum, mean, amax, var, ...): numel of the input
    pooling: numel of output * prod(kernel)  adaptive pooling: numel of the input
    upsample: numel of output * taps (nearest 1, linear 2, bilinear 4, bicubic 16, trilinear 8)
    data movement (copy, cat, pad, index, views ...): 0
    anything else (elementwise, activations): 1 per output element

Level rule (LEVEL_RULE = "kernelmill-level-v1"). ``n`` = ops that launch a kernel (everything but
VIEW_OPS), ``h`` = heavy ops (matmul and convolution families, attention):
    1  n <= 1                                a single op
    2  2 <= n <= 6 and h <= 1                a short fused chain
    3  n <= 30 otherwise                     a block (7-30 ops, or several heavy ops)
    4  n > 30                                a whole model

Curriculum: ``difficulty = level + min(0.999, log10(1 + flops + bytes_moved) / 16)``, so tasks
sort by level first and size within a level; :func:`order_curriculum` sorts by it.

Isolation: reference code may be mined from anywhere, so it runs in a separate worker process
(one worker serves many tasks) with a per-task timeout and an address-space limit; a worker that
times out or crashes is killed and replaced, and the task is reported as a failure. Not protected
against: code that reads or writes files, uses the network or spawns processes of its own; run
untrusted sources in a container when that matters.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from typing import Any

from kernelmill.schema import OpCount, Task, TensorSpec

FLOP_RULES = "kernelmill-flops-v1"
LEVEL_RULE = "kernelmill-level-v1"
MAX_TRACED_OPS = 256

VIEW_OPS = frozenset("""
view _unsafe_view reshape _reshape_alias expand expand_as t transpose permute squeeze unsqueeze slice
select alias detach lift_fresh as_strided unfold split split_with_sizes chunk unbind narrow diagonal
view_as movedim sym_size sym_stride sym_numel size stride is_contiguous _local_scalar_dense item
empty empty_like empty_strided new_empty new_empty_strided dim numel
""".split())
MOVEMENT_OPS = frozenset("""
clone contiguous copy copy_ _to_copy to cat stack constant_pad_nd pad reflection_pad1d reflection_pad2d
reflection_pad3d replication_pad1d replication_pad2d replication_pad3d flip roll repeat index index_select
gather scatter index_put index_put_ masked_select zeros zeros_like ones ones_like full full_like fill fill_
zero_ new_zeros new_ones new_full scalar_tensor arange _to_dense
""".split())
HEAVY_OPS = frozenset("""
mm addmm bmm baddbmm addbmm matmul mv dot convolution _convolution conv1d conv2d conv3d conv_transpose1d
conv_transpose2d conv_transpose3d cudnn_convolution mkldnn_convolution _scaled_dot_product_flash_attention
_scaled_dot_product_efficient_attention _scaled_dot_product_attention_math scaled_dot_product_attention
_scaled_dot_product_flash_attention_for_cpu
""".split())
REDUCTION_OPS = frozenset("""
sum mean amax amin max min prod var std var_mean std_mean norm linalg_vector_norm argmax argmin logsumexp
cumsum cumprod all any nansum count_nonzero aminmax
""".split())
NORM_OPS = {"native_layer_norm": 5, "native_group_norm": 5, "_fused_rms_norm": 5, "rms_norm": 5,
            "native_batch_norm": 4, "_native_batch_norm_legit": 4, "_native_batch_norm_legit_no_training": 4,
            "batch_norm": 4, "instance_norm": 5}
UPSAMPLE_TAPS = {"upsample_nearest1d": 1, "upsample_nearest2d": 1, "upsample_nearest3d": 1,
                 "_upsample_nearest_exact1d": 1, "_upsample_nearest_exact2d": 1, "_upsample_nearest_exact3d": 1,
                 "upsample_linear1d": 2, "upsample_bilinear2d": 4, "upsample_bicubic2d": 16,
                 "upsample_trilinear3d": 8, "_upsample_bilinear2d_aa": 4, "_upsample_bicubic2d_aa": 16}


# ---------------------------------------------------------------------------- FLOPs (plain data)


def _numel(shape) -> int:
    return math.prod(int(d) for d in shape)


def op_flops(name: str, ins: list[list[int]], outs: list[list[int]], args: dict) -> tuple[int, bool]:
    """FLOPs of one aten op from its tensor shapes (and, for conv/pool, ``args``); (flops, known).

    ``name`` is the op packet name without the ``aten.`` prefix; ``ins`` the shapes of its tensor
    inputs in argument order; ``outs`` of its outputs. ``known`` is False when the default rule
    (1 per output element) was used."""
    out_numel = sum(_numel(s) for s in outs[:1]) if outs else 0
    base = name.rstrip("_") if name.endswith("_") and not name.startswith("_") else name
    if base in VIEW_OPS or base in MOVEMENT_OPS:
        return 0, True
    if base == "mm":
        (m, k), (_, n) = ins[0], ins[1]
        return 2 * m * n * k, True
    if base == "addmm":
        (m, k), (_, n) = ins[1], ins[2]
        return 2 * m * n * k + m * n, True
    if base in ("bmm", "baddbmm"):
        a, b = (ins[0], ins[1]) if base == "bmm" else (ins[1], ins[2])
        bsz, m, k = a
        n = b[2]
        return 2 * bsz * m * n * k + (bsz * m * n if base == "baddbmm" else 0), True
    if base == "mv":
        m, k = ins[0]
        return 2 * m * k, True
    if base in ("dot", "vdot"):
        return 2 * int(ins[0][0]), True
    if base in ("convolution", "_convolution", "mkldnn_convolution", "cudnn_convolution"):
        x, w = ins[0], ins[1]
        groups = int(args.get("groups", 1) or 1)
        kernel = _numel(w[2:])
        if args.get("transposed"):
            flops = 2 * _numel(x) * (int(w[1])) * kernel  # w: [Cin, Cout/groups, k...]
        else:
            flops = 2 * out_numel * (int(x[1]) // groups) * kernel
        has_bias = len(ins) > 2 and args.get("has_bias", True)
        return flops + (out_numel if has_bias else 0), True
    if base in ("_softmax", "softmax", "_log_softmax", "log_softmax"):
        return 5 * out_numel, True
    if base in NORM_OPS:
        return NORM_OPS[base] * _numel(ins[0]), True
    if base in REDUCTION_OPS:
        if base in ("max", "min") and len(ins) >= 2:  # binary max/min overloads are elementwise
            return out_numel, True
        return _numel(ins[0]) if ins else 0, True
    if "pool" in base:
        if "adaptive" in base:
            return _numel(ins[0]), True
        kernel = args.get("kernel_size") or [1]
        kernel = [kernel] if isinstance(kernel, int) else list(kernel)
        return out_numel * _numel(kernel), True
    if base in UPSAMPLE_TAPS:
        return out_numel * UPSAMPLE_TAPS[base], True
    return out_numel, False


def is_heavy(name: str) -> bool:
    return name in HEAVY_OPS


def launches_kernel(name: str) -> bool:
    return name not in VIEW_OPS


def level_for(n_compute: int, n_heavy: int) -> int:
    """The documented level rule (kernelmill-level-v1)."""
    if n_compute <= 1:
        return 1
    if n_compute <= 6 and n_heavy <= 1:
        return 2
    if n_compute <= 30:
        return 3
    return 4


def difficulty_for(level: int, flops: int, bytes_moved: int) -> float:
    return level + min(0.999, math.log10(1 + flops + bytes_moved) / 16)


# ---------------------------------------------------------------------------- worker side


def _trace_program(code: str, seed: int) -> dict:
    """Run a KernelBench program once under a recording dispatch mode; plain data out."""
    import inspect

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    records: list = []

    def spec(t) -> list:
        return [list(t.shape), str(t.dtype).removeprefix("torch.")]

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = func._overloadpacket.__name__
            ins = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
            outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
            extra = {}
            if "convolution" in name:
                extra = {"transposed": bool(args[6]) if len(args) > 6 else False,
                         "groups": int(args[8]) if len(args) > 8 else 1,
                         "has_bias": len(args) > 2 and args[2] is not None}
            elif "pool" in name and len(args) > 1:
                extra = {"kernel_size": list(args[1]) if isinstance(args[1], (list, tuple)) else args[1]}
            records.append((str(func), name, [spec(t) for t in ins], [spec(t) for t in outs], extra))
            return out

    ns: dict[str, Any] = {"__name__": "kernelmill_task"}
    exec(compile(code, "<reference>", "exec", dont_inherit=True), ns)
    torch.manual_seed(seed)
    init = ns["get_init_inputs"]()
    model = ns["Model"](*init)
    inputs = ns["get_inputs"]()
    try:
        names = [p for p in inspect.signature(model.forward).parameters]
    except (TypeError, ValueError):
        names = []
    with torch.no_grad(), Recorder():
        out = model(*inputs)
    outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
    if not outs:
        raise TypeError(f"forward returned no tensor ({type(out).__name__})")
    seen, weights = set(), []
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            weights.append(spec(t) + [t.element_size()])
    in_specs = []
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            nm = names[i] if i < len(names) and names[i] not in ("args", "kwargs") else f"input{i}"
            in_specs.append([nm] + spec(x) + [x.element_size()])
    try:
        init_repr = repr(init) if _plain(init) else ""
    except Exception:
        init_repr = ""
    return {"records": records, "inputs": in_specs, "weights": weights,
            "outputs": [[f"output{i}"] + spec(o) + [o.element_size()] for i, o in enumerate(outs)],
            "init_inputs": init_repr}


def _plain(x) -> bool:
    if isinstance(x, (list, tuple)):
        return all(_plain(v) for v in x)
    if isinstance(x, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in x.items())
    return x is None or isinstance(x, (bool, int, float, str))


def _worker_stdio() -> None:
    """Worker entry point: framed pickles on stdin/stdout, one (task_id, code, seed) at a time.

    Replies ("ok", trace) or ("error", message). The program's own prints go to stderr (the
    protocol keeps a private copy of stdout)."""
    from multiprocessing.connection import Connection

    memory_limit_gb = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
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
    import torch  # noqa: F401  (imported before "ready" so the first task's timeout excludes it)

    send.send(("ready", None))
    while True:
        try:
            msg = recv.recv()
        except EOFError:
            return
        if msg is None:
            return
        _task_id, code, seed = msg
        try:
            send.send(("ok", _trace_program(code, seed)))
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

    def __init__(self, memory_limit_gb: float = 16.0, start_timeout_s: float = 120.0):
        self.memory_limit_gb = memory_limit_gb
        self.start_timeout_s = start_timeout_s
        self.proc = None
        self.send_conn = self.recv_conn = None

    def _start(self) -> None:
        import subprocess
        from multiprocessing.connection import Connection

        from kernelmill.config import REPO_ROOT

        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from synth.annotate import _worker_stdio; _worker_stdio()",
             str(self.memory_limit_gb)],
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
            self.send_conn.send((task_id, code, seed))
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


# ---------------------------------------------------------------------------- parent side


def annotation_from_trace(task: Task, trace: dict, device_spec: str) -> Task:
    """The annotated copy of ``task`` built from a worker's trace (pure function of its inputs)."""
    from synth.devices import get_device

    device = get_device(device_spec)
    ops, hist, unknown = [], {}, set()
    flops = n_compute = n_heavy = 0
    for full, name, ins, outs, extra in trace["records"]:
        f, known = op_flops(name, [s for s, _ in ins], [s for s, _ in outs], extra)
        flops += f
        if not known:
            unknown.add(name)
        if launches_kernel(name):
            n_compute += 1
            n_heavy += is_heavy(name)
            hist[f"aten.{name}"] = hist.get(f"aten.{name}", 0) + 1
        if len(ops) < MAX_TRACED_OPS:
            ops.append({"op": full, "inputs": ins, "outputs": outs, "flops": f})
    tensors = trace["inputs"] + trace["weights"]
    bytes_moved = sum(_numel(t[-3]) * t[-1] for t in tensors) + sum(_numel(o[1]) * o[3] for o in trace["outputs"])
    floats = [t for t in tensors if str(t[-2]).startswith(("float", "bfloat"))]
    floor_dtype = max(floats, key=lambda t: _numel(t[-3]) * t[-1])[-2] if floats else "float32"
    floor_us = device.floor_time_us(flops, bytes_moved, floor_dtype)
    rule_level = level_for(n_compute, n_heavy)
    level = task.level if task.level and task.level > 0 else rule_level
    compute_s = flops / device.peak_for(floor_dtype)
    ann = dict(task.annotations)
    ann.update({
        "ops": ops, "ops_truncated": max(0, len(trace["records"]) - MAX_TRACED_OPS),
        "compute_ops": n_compute, "heavy_ops": n_heavy, "rule_level": rule_level,
        "given_level": task.level if task.level and task.level > 0 else None,
        "level_rule": LEVEL_RULE, "flop_rule": FLOP_RULES, "default_flop_ops": sorted(unknown),
        "device_spec": device.as_dict(), "floor_dtype": floor_dtype,
        "bound": "compute" if compute_s * 1e6 >= floor_us else "memory",
        "arithmetic_intensity": flops / bytes_moved if bytes_moved else 0.0,
    })
    return dataclasses.replace(
        task,
        input_specs=[TensorSpec(n, list(s), d) for n, s, d, _ in trace["inputs"]],
        output_specs=[TensorSpec(n, list(s), d) for n, s, d, _ in trace["outputs"]],
        init_inputs=trace["init_inputs"] or task.init_inputs,
        op_histogram=[OpCount(op, c) for op, c in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))],
        flops=int(flops), bytes_moved=int(bytes_moved), floor_time_us=float(floor_us),
        level=int(level), difficulty=difficulty_for(level, flops, bytes_moved), annotations=ann)


def annotate_tasks(tasks: list[Task], *, device_spec: str = "H100-SXM", timeout_s: float = 60,
                   memory_limit_gb: float = 16.0) -> tuple[list[Task], list[tuple[str, str]]]:
    """Annotated copies of ``tasks`` (input order, failures left out) and (task_id, reason) failures.

    Every program runs in a worker process (see the module docstring); a task that raises, times
    out or kills its worker becomes a failure and the rest go on. The input tasks are not changed."""
    from synth.devices import get_device

    get_device(device_spec)  # a bad name fails before any work starts
    annotated, failures = [], []
    if not tasks:
        return annotated, failures
    worker = TraceWorker(memory_limit_gb=memory_limit_gb)
    try:
        for task in tasks:
            status, data = worker.run(task.task_id, task.reference_code, timeout_s)
            if status != "ok":
                failures.append((task.task_id, str(data)))
                continue
            try:
                annotated.append(annotation_from_trace(task, data, device_spec))
            except Exception as e:  # a trace we cannot interpret is this task's failure only
                failures.append((task.task_id, f"annotation failed: {type(e).__name__}: {e}"))
    finally:
        worker.close()
    return annotated, failures


def order_curriculum(tasks: list[Task]) -> list[Task]:
    """Tasks easy to hard: by level, then difficulty (size), then name and id for a stable order.

    Tasks not annotated yet (difficulty 0) sort first within their level."""
    return sorted(tasks, key=lambda t: (t.level, t.difficulty, t.name, t.task_id))


# ---------------------------------------------------------------------------- reports


def summary_table(tasks: list[Task]) -> str:
    """Per-level counts and median floor time, in curriculum order."""
    rows = {}
    for t in tasks:
        rows.setdefault(t.level, []).append(t)
    lines = [f"{'level':>5}  {'tasks':>5}  {'median flops':>14}  {'median bytes':>14}  {'median floor_us':>15}"]
    for level in sorted(rows):
        ts = rows[level]
        med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
        lines.append(f"{level:>5}  {len(ts):>5}  {med([t.flops for t in ts]):>14}  "
                     f"{med([t.bytes_moved for t in ts]):>14}  {med([t.floor_time_us for t in ts]):>15.3f}")
    return "\n".join(lines)
