"""Annotate every task, whatever its source, and order tasks as a curriculum.

``annotate_tasks`` (or ``annotate_stream``, which yields each task as it is done) runs each task's reference
program once, in a worker process (synth/annotate/trace_worker.py), under a ``TorchDispatchMode`` that records every
aten op dispatched by ``Model.forward`` with its input and output shapes and dtypes. The program runs on fake
tensors (shapes and dtypes, no data), so a KernelBench level-1 input of 6.4 GB or a model with billions of weights
costs no memory; programs that fake tensors cannot run (data-dependent ops) are run for real within a memory
budget, and any device a program asks for (``.cuda()``) is mapped to cpu. From that trace it fills the Task fields:
- ``input_specs`` / ``output_specs``: name (forward's parameter names; ``output<i>``), shape, dtype of each tensor
  argument and each tensor in the output;
- ``op_histogram``: aten op -> count (``aten.mm``, ``aten.convolution``, ...), leaving out ops that launch no kernel
  (views, aliases, shape queries: ``VIEW_OPS``);
- ``flops``: the sum over dispatched ops of the FLOP table below (``op_flops``);
- ``bytes_moved``: bytes of the forward's tensor inputs + the model's parameters and buffers + the output tensors,
  each tensor counted once: the least traffic any implementation needs (read everything once, write the result
  once; intermediates are assumed to stay on chip);
- ``floor_time_us``: roofline floor on a named device (synth/annotate/devices.py):
  ``max(flops / peak[dtype], bytes_moved / bandwidth)``, with dtype the dtype of the largest floating-point input,
  parameter or buffer;
- ``level`` and ``difficulty``: the rule below. A task that arrived with a level (a KernelBench ``levelN`` folder)
  keeps it; the rule's level is always in ``annotations["rule_level"]``;
- ``annotations``: the per-op trace (``ops``: op, input/output shapes and dtypes, FLOPs; the first
  ``MAX_TRACED_OPS`` ops), counts, device spec, floor dtype, bound (compute/memory), rule names, the ops counted by
  the table's default rule (``default_flop_ops``: 1 FLOP per output element); ``traced_with`` ("fake" or "real"),
  ``requested_devices`` (devices the program asked for, e.g. ``["cuda"]``) and, for a real run, ``fake_error`` (why
  fake tensors could not run it).

FLOP table (``FLOP_RULES`` = "kernelmill-flops-v1"), per aten op family:

    mm: 2*M*N*K        addmm: 2*M*N*K + M*N      bmm: 2*B*M*N*K     baddbmm: 2*B*M*N*K + B*M*N
    mv: 2*M*K          dot/vdot: 2*K
    convolution: 2 * N*Cout*prod(out spatial) * (Cin/groups) * prod(kernel), + N*Cout*prod(out) with bias
                 (transposed: 2 * N*Cin*prod(in spatial) * (Cout/groups) * prod(kernel))
    softmax, log_softmax: 5 per element      layer/group/rms/instance norm: 5 per element of the input
    batch norm: 4 per element                reductions (sum, mean, amax, var, ...): numel of the input
    pooling: numel of output * prod(kernel)  adaptive pooling: numel of the input
    upsample: numel of output * taps (nearest 1, linear 2, bilinear 4, bicubic 16, trilinear 8)
    data movement (copy, cat, pad, index, views ...): 0
    anything else (elementwise, activations): 1 per output element

Level rule (``LEVEL_RULE`` = "kernelmill-level-v1"; ``level_for``). n = ops that launch a kernel (everything but
VIEW_OPS), h = heavy ops (matmul and convolution families, attention: ``HEAVY_OPS``):

    1  n <= 1                                a single op
    2  2 <= n <= 6 and h <= 1                a short fused chain
    3  n <= 30 otherwise                     a block (7-30 ops, or several heavy ops)
    4  n > 30                                a whole model

Curriculum: ``difficulty = level + min(0.999, log10(1 + flops + bytes_moved) / 16)``, so tasks sort by level first
and size within a level; :func:`order_curriculum` sorts by it.

Isolation: reference code may be mined from anywhere, so it runs in a separate worker process (one worker serves
many tasks; ``workers`` of them side by side) with a per-task timeout and an address-space limit; a worker that
times out or crashes is killed and replaced, and the task is reported as a failure with its reason. Not protected
against: code that reads or writes files, uses the network or spawns processes of its own; run untrusted sources
in a container when that matters. Writing rows as they finish, and remembering failures across runs:
synth/annotate/store.py.
"""

from __future__ import annotations

import dataclasses
import math
import queue
import threading
import time
from dataclasses import dataclass
from typing import Iterator

from kernelmill.schema import OpCount, Task, TensorSpec
from kernelmill.settings import AnnotateSettings  # the library functions' keyword defaults are its defaults
from synth.annotate.devices import get_device
from synth.annotate.trace_worker import TraceWorker

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


# ---------------------------------------------------------------------------- parent side


def annotation_from_trace(task: Task, trace: dict, device_spec: str) -> Task:
    """The annotated copy of ``task`` built from a worker's trace (pure function of its inputs)."""
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
        "traced_with": trace.get("traced_with", "real"), "requested_devices": trace.get("requested_devices", []),
    })
    if trace.get("fake_error"):
        ann["fake_error"] = trace["fake_error"]
    return dataclasses.replace(
        task,
        input_specs=[TensorSpec(n, list(s), d) for n, s, d, _ in trace["inputs"]],
        output_specs=[TensorSpec(n, list(s), d) for n, s, d, _ in trace["outputs"]],
        init_inputs=trace["init_inputs"] or task.init_inputs,
        op_histogram=[OpCount(op, c) for op, c in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))],
        flops=int(flops), bytes_moved=int(bytes_moved), floor_time_us=float(floor_us),
        level=int(level), difficulty=difficulty_for(level, flops, bytes_moved), annotations=ann)


@dataclass
class AnnotationOutcome:
    """One task's annotation: ``annotated`` is the annotated copy, or None with ``reason`` saying why
    (the program's error, ``timeout: ...``, ``worker crashed ...``). ``seconds``: wall time in the worker."""
    task: Task
    annotated: Task | None
    reason: str = ""
    seconds: float = 0.0


def _outcome(task: Task, status: str, data, device_spec: str, seconds: float) -> AnnotationOutcome:
    if status != "ok":
        return AnnotationOutcome(task, None, str(data), seconds)
    try:
        return AnnotationOutcome(task, annotation_from_trace(task, data, device_spec), "", seconds)
    except Exception as e:  # a trace we cannot interpret is this task's failure only
        return AnnotationOutcome(task, None, f"annotation failed: {type(e).__name__}: {e}", seconds)


def annotate_stream(tasks: list[Task], *, device_spec: str = AnnotateSettings.device_spec,
                    timeout_s: float = AnnotateSettings.timeout_s,
                    memory_limit_gb: float = AnnotateSettings.memory_limit_gb,
                    workers: int = AnnotateSettings.workers, mode: str = "auto",
                    real_budget_gb: float = AnnotateSettings.real_budget_gb) -> Iterator[AnnotationOutcome]:
    """One outcome per task, in the order they finish, from ``workers`` worker processes.

    Every task gets exactly one outcome unless the caller stops iterating early; closing the
    generator (or an exception in the caller, e.g. Ctrl-C) kills the workers at once. ``mode`` and
    ``real_budget_gb``: see synth.annotate.trace_worker.trace_program. The input tasks are not changed."""
    get_device(device_spec)  # a bad name fails before any work starts
    if not tasks:
        return
    pending: queue.SimpleQueue = queue.SimpleQueue()
    for t in tasks:
        pending.put(t)
    results: queue.SimpleQueue = queue.SimpleQueue()
    stop = threading.Event()
    pool = [TraceWorker(memory_limit_gb=memory_limit_gb, mode=mode, real_budget_gb=real_budget_gb)
            for _ in range(max(1, min(workers, len(tasks))))]

    def serve(worker: TraceWorker) -> None:
        try:
            while not stop.is_set():
                try:
                    task = pending.get_nowait()
                except queue.Empty:
                    return
                t0 = time.perf_counter()
                status, data = worker.run(task.task_id, task.reference_code, timeout_s)
                results.put(_outcome(task, status, data, device_spec, time.perf_counter() - t0))
        except BaseException as e:  # a worker that cannot start is everyone's problem: re-raised below
            results.put(e)
        finally:
            worker.close()

    threads = [threading.Thread(target=serve, args=(w,), daemon=True) for w in pool]
    for th in threads:
        th.start()
    done = 0
    try:
        while done < len(tasks):
            r = results.get()
            if isinstance(r, BaseException):
                raise r
            done += 1
            yield r
    finally:
        stop.set()
        if done < len(tasks):  # stopped early: do not wait for programs in flight
            for w in pool:
                w.kill()
        for th in threads:
            th.join()


def annotate_tasks(tasks: list[Task], *, device_spec: str = AnnotateSettings.device_spec,
                   timeout_s: float = AnnotateSettings.timeout_s,
                   memory_limit_gb: float = AnnotateSettings.memory_limit_gb,
                   workers: int = AnnotateSettings.workers, mode: str = "auto",
                   real_budget_gb: float = AnnotateSettings.real_budget_gb) -> tuple[list[Task], list[tuple[str, str]]]:
    """Annotated copies of ``tasks`` (input order, failures left out) and (task_id, reason) failures.

    Every program runs in a worker process (see the module docstring); a task that raises, times
    out or kills its worker becomes a failure and the rest go on. The input tasks are not changed."""
    order = {id(t): i for i, t in enumerate(tasks)}
    outcomes = sorted(annotate_stream(tasks, device_spec=device_spec, timeout_s=timeout_s,
                                      memory_limit_gb=memory_limit_gb, workers=workers, mode=mode,
                                      real_budget_gb=real_budget_gb), key=lambda o: order[id(o.task)])
    return ([o.annotated for o in outcomes if o.annotated is not None],
            [(o.task.task_id, o.reason) for o in outcomes if o.annotated is None])


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
