"""Structured reasoning traces: one per task, by an LLM when one is configured, else by a template.

The template (``template_trace``) is a pure function of the task's annotations and, when the
teacher can lower the task, of its kernel plan. Its sections, always in this order:

    Shapes       each input's dtype and shape; the output's
    Ops          the op histogram (aten ops that launch a kernel in eager PyTorch)
    Cost         FLOPs, bytes moved, arithmetic intensity, roofline floor and which roof binds
    Plan         one line per kernel: what it computes and which ops it fuses
    Parallelism  how each kernel maps to threads/blocks (cuda) or loops (cpu)
    Memory       access pattern: contiguous / broadcast (stride 0) / strided operands, intermediates
    Checks       what must hold for correctness (bounds, numerics)

Numbers the task does not carry (an unannotated task) are estimated from the plan and marked
"(estimated)". ``llm_trace`` asks a configured LLM for the same sections; its text is kept as is.
"""

from __future__ import annotations

import math

from kernelmill.schema import Message, Task
from synth.generate.prompts import build_prompt, device_name
from synth.teacher.lowering import lower_reference

SECTIONS = ("Shapes", "Ops", "Cost", "Plan", "Parallelism", "Memory", "Checks")


def _plan(task: Task):
    try:
        return lower_reference(task.reference_code)
    except Exception:  # an unlowerable task still gets a trace, without a kernel plan
        return None


def _kernel_line(i: int, s, prog) -> tuple[str, str, str]:
    """(plan, parallelism-cuda, memory) descriptions of one kernel step."""
    a = s.args
    if s.kind == "pointwise":
        ops = [line.split("=", 1)[1].strip().rstrip(";") for line in a["body"]]
        fused = f"{len(ops)} elementwise op(s) fused" if len(ops) > 1 else "one elementwise op"
        shape = list(prog.shapes[s.out])
        bc = [leaf for leaf in a["leaves"] if tuple(prog.shapes[leaf]) != tuple(prog.shapes[s.out])]
        mem = ("operands read with broadcast strides (stride 0 on broadcast dims): " + ", ".join(
            f"{list(prog.shapes[b])}" for b in bc)) if bc else "all operands contiguous, read with the flat index"
        return (f"k{i} pointwise over {shape}: {fused}, result written once",
                f"k{i}: one thread per output element, 1-D grid", f"k{i}: {mem}; coalesced stores")
    if s.kind in ("reduce", "softmax"):
        shape = list(prog.shapes[a["x"]])
        dims = [a["dim"]] if s.kind == "softmax" else list(range(a["d0"], a["d1"] + 1))
        what = (("log-softmax" if a["log"] else "softmax") if s.kind == "softmax"
                else ("mean" if a["mean"] else a["op"]))
        inner = math.prod(shape[dims[-1] + 1:]) if shape else 1
        par = (f"k{i}: one block per row, warp shuffles + shared memory for the block reduction" if inner == 1
               else f"k{i}: one thread per output element looping over the reduced extent")
        passes = "three passes (max, sum of exp, write)" if s.kind == "softmax" else "one pass, float32 accumulator"
        return (f"k{i} {what} over dim(s) {dims} of {shape}: {passes}",
                par, f"k{i}: input viewed as [outer, R, inner] (contiguous); " +
                ("rows are contiguous" if inner == 1 else "threads of a warp read adjacent inner elements"))
    if s.kind == "layernorm":
        return (f"k{i} layer norm over the last {a['norm_ndim']} dim(s) of {list(prog.shapes[a['x']])}"
                + (", affine" if a["w"] else ""),
                f"k{i}: one block per row; mean then variance by block reductions",
                f"k{i}: each row read three times from cache-friendly contiguous memory")
    if s.kind == "matmul":
        extra = " + bias" if a["bias"] else ""
        return (f"k{i} matmul [{a['m']}x{a['k']}] @ [{a['k']}x{a['n']}]{extra}" + (" (batched)" if a["batched"] else ""),
                f"k{i}: TILE x TILE thread blocks; A and B tiles staged in shared memory, one output per thread",
                f"k{i}: operands read through their strides (a transposed weight costs no copy)")
    return (f"k{i} {s.kind}", "", "")


def template_trace(task: Task, backend: str) -> str:
    """The documented template trace for a task (see module docstring). Deterministic."""
    prog = _plan(task)
    lines = ["## Reasoning", "", "Shapes:"]
    if task.input_specs:
        lines += [f"- input `{s.name}`: {s.dtype} {list(s.shape)}" for s in task.input_specs]
    elif prog:
        lines += [f"- input `{n}`: float32 {list(sh)}" for n, sh in zip(prog.forward_params, prog.input_shapes)]
    if task.output_specs:
        lines += [f"- output `{s.name}`: {s.dtype} {list(s.shape)}" for s in task.output_specs]
    elif prog:
        lines.append(f"- output: float32 {list(prog.shapes[prog.output])}")
    lines += ["", "Ops:"]
    if task.op_histogram:
        lines.append("- " + ", ".join(f"{o.op} x{o.count}" for o in task.op_histogram))
    elif prog:
        lines.append("- " + ", ".join(f"aten.{k} x{v}" for k, v in sorted(prog.op_histogram.items())))
    lines += ["", "Cost:"]
    flops, nbytes, est = task.flops, task.bytes_moved, ""
    if not nbytes and prog:
        est = " (estimated)"
        nbytes = 4 * (sum(math.prod(s) for s in prog.input_shapes) + math.prod(prog.shapes[prog.output]))
        flops = sum(2 * s.args["m"] * s.args["n"] * s.args["k"] * (
            prog.shapes[s.out][0] if s.args["batched"] else 1) if s.kind == "matmul"
            else math.prod(prog.shapes[s.out]) * max(1, len(s.args.get("body", [1]))) for s in prog.kernels())
    lines.append(f"- {flops:,} FLOPs, {nbytes:,} bytes moved{est}; arithmetic intensity "
                 f"{(flops / nbytes if nbytes else 0):.2f} FLOP/byte")
    ann = task.annotations if isinstance(task.annotations, dict) else {}
    if task.floor_time_us:
        lines.append(f"- roofline floor {task.floor_time_us:.2f} us on {device_name(ann) or 'the annotated device'}"
                     f": {ann.get('bound', 'memory' if flops / max(nbytes, 1) < 10 else 'compute')}-bound")
    else:
        lines.append(f"- {'compute' if nbytes and flops / nbytes >= 10 else 'memory'}-bound by intensity{est}")
    plan, par, mem = [], [], []
    if prog:
        for i, s in enumerate(prog.kernels()):
            p, q, m = _kernel_line(i, s, prog)
            plan.append(p)
            par.append(q if backend == "cuda" else f"k{i}: serial loops over the same iteration space")
            mem.append(m)
        views = [s for s in prog.steps if s.kind == "view" and s.args["op"] != "alias"]
        if views:
            plan.append(f"{len(views)} view(s) ({', '.join(sorted({v.args['op'] for v in views}))}) as metadata only")
        if len(prog.kernels()) > 1:
            mem.append("intermediates between kernels allocated with torch::empty; elementwise chains fused so "
                       "each materialised tensor is written once")
    else:
        plan.append("no kernel plan: lower each op family to its own kernel and fuse elementwise chains")
    lines += ["", "Plan:", *(f"- {p}" for p in plan), "", "Parallelism:", *(f"- {p}" for p in par or ["- n/a"]),
              "", "Memory:", *(f"- {m}" for m in mem or ["- n/a"]), "", "Checks:",
              "- every index guarded by its extent (tails when sizes are not multiples of the block/tile)",
              "- float32 accumulation; softmax subtracts the row max; variance by two passes",
              "- sizes read at runtime, so other shapes of the same rank work"]
    return "\n".join(lines)


def llm_trace_messages(task: Task, backend: str) -> list[Message]:
    """The chat that asks an LLM for a structured trace with the template's sections."""
    msgs = build_prompt(task, backend)
    ask = ("Before writing any code, write only a structured reasoning trace for this task with these "
           "sections, one heading each: " + ", ".join(SECTIONS) + ". Be concrete about shapes, the cost, "
           "which kernels you will write, what you fuse, how threads map to data and how memory is accessed. "
           "Do not write code.")
    return msgs + [Message("user", ask)]


def llm_trace(task: Task, backend: str, generator) -> str:
    """A trace written by the configured LLM (one sample), or the template when it returns nothing."""
    out = generator.generate(llm_trace_messages(task, backend), 1)
    text = (out[0] if out else "").strip()
    return text or template_trace(task, backend)


def trace_for(task: Task, backend: str, generator=None) -> str:
    """The task's reasoning trace: the LLM's when ``generator`` is an LLM, else the template's."""
    if generator is not None and generator.is_llm:
        return llm_trace(task, backend, generator)
    return template_trace(task, backend)
