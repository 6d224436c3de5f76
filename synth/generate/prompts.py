"""Prompts in the MusaCoder structure, and the repair turn built from a verdict's feedback.

``build_prompt(task, backend)`` gives two messages. The system message states the rules (ModelNew,
native kernels through load_inline, the anti-fallback rule); the user message holds, in order:

    1. the reference program (a ```python block: the teacher reads it from there)
    2. input shapes and dtypes (from the task's input_specs), the output shapes
    3. the target backend and what a kernel is on it
    4. the ModelNew requirement (same __init__ / forward signatures, parameters copied from Model)
    5. the anti-fallback rule (no torch/aten compute in ModelNew, no try/except fallback)
    6. the task's shape annotations (op histogram, FLOPs, bytes, roofline floor) when annotated
    7. the answer format: reasoning first, then one ```python block

``build_repair_turn(verdict)`` turns the verifier's feedback into the next user message.
The code of a response is pulled out by the verifier's extractor (verifier.front.extract.extract_code),
through synth.generate.generators.make_candidate: there is one extractor.
"""

from __future__ import annotations

from kernelmill.schema import Message, Task, Verdict

BACKEND_RULES = {
    "cuda": ("CUDA: write `__global__` kernels in CUDA C++ and launch them from a C++ wrapper with "
             "`<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>`; build them with "
             "`torch.utils.cpp_extension.load_inline(name=..., cpp_sources=..., cuda_sources=..., functions=[...])`."),
    "cpu": ("CPU: write C++ functions with plain loops over `data_ptr<float>()` and build them with "
            "`torch.utils.cpp_extension.load_inline(name=..., cpp_sources=..., functions=[...])`."),
}

SYSTEM_PROMPT = (
    "You are an expert kernel engineer. You rewrite PyTorch reference programs as custom native kernels "
    "that compute exactly the same result, faster. You think step by step about shapes, memory traffic and "
    "parallelisation before writing code, and you answer with a single complete Python file."
)

ANTI_FALLBACK = (
    "Anti-fallback rule: all computation in `ModelNew.forward` must run in your own kernels. Do not call "
    "PyTorch or ATen compute (torch.matmul, F.softmax, `@`, x.relu(), an nn layer's forward, torch.compile, "
    "cuBLAS/cuDNN), do not keep a `try/except` or branch that falls back to the reference, do not inherit "
    "from or hold `Model`, and do not cache results between calls. Allowed in Python: allocation "
    "(torch.empty / empty_like) and views (.view, .reshape, .contiguous, .size, .stride); nn layers may be "
    "held only as parameter containers (pass `self.linear.weight` to your kernel, never call `self.linear(x)`)."
)


def _spec_lines(specs) -> list[str]:
    return [f"- `{s.name}`: {s.dtype} {list(s.shape)}" for s in specs]


def device_name(ann: dict) -> str:
    """The device an annotation's roofline was computed for ("" when none is named)."""
    dev = ann.get("device_spec", "")
    return str(dev.get("name", "")) if isinstance(dev, dict) else str(dev or "")


def _annotation_lines(task: Task) -> list[str]:
    lines = []
    if task.op_histogram:
        lines.append("- ops: " + ", ".join(f"{o.op} x{o.count}" for o in task.op_histogram))
    if task.flops:
        lines.append(f"- FLOPs: {task.flops:,}")
    if task.bytes_moved:
        lines.append(f"- bytes moved (inputs + outputs, once): {task.bytes_moved:,}")
    ann = task.annotations if isinstance(task.annotations, dict) else {}
    if task.floor_time_us:
        dev = device_name(ann)
        lines.append(f"- roofline floor: {task.floor_time_us:.2f} us" + (f" on {dev}" if dev else "")
                     + (f" ({ann['bound']}-bound)" if ann.get("bound") else ""))
    for item in (ann.get("ops") or [])[:12]:
        if isinstance(item, dict):
            shapes = lambda xs: ", ".join(str(x) for x in (xs or []))  # noqa: E731
            lines.append(f"- `{item.get('op', '?')}`: ({shapes(item.get('inputs'))}) -> ({shapes(item.get('outputs'))})"
                         + (f", {item['flops']:,} FLOPs" if item.get("flops") else ""))
    return lines


def build_prompt(task: Task, backend: str) -> list[Message]:
    """The first-turn chat for a task on a backend (system + user). Deterministic in its inputs."""
    parts = [
        f"Task `{task.name}` (level {task.level}): write `ModelNew` for the {backend} backend.",
        "",
        "## Reference program",
        "```python",
        task.reference_code.rstrip(),
        "```",
        "",
        "## Inputs",
        *(_spec_lines(task.input_specs) or ["- as produced by `get_inputs()` above"]),
        f"- constructor arguments (`get_init_inputs()`): {task.init_inputs}",
    ]
    if task.output_specs:
        parts += ["", "## Outputs", *_spec_lines(task.output_specs)]
    parts += [
        "",
        "## Target backend",
        BACKEND_RULES.get(backend, f"{backend}: native kernels through load_inline."),
        "",
        "## Requirements",
        "Define `class ModelNew(nn.Module)` with the same `__init__` and `forward` signatures as `Model`. "
        "The checker builds Model and ModelNew under the same seed and copies Model's parameters into "
        "ModelNew where names and shapes match, then compares outputs on fresh random inputs "
        "(float32 tolerance 1e-4), also on another valid shape, so do not hard-code sizes. Keep "
        "`load_inline` at module level with literal source strings, a `name=` and `functions=[...]`.",
        "",
        ANTI_FALLBACK,
    ]
    ann = _annotation_lines(task)
    if ann:
        parts += ["", "## Shape annotations", *ann]
    parts += ["", "## Answer format",
              "First a short structured reasoning (shapes, cost, plan: kernels, fusion, parallelisation, "
              "memory access), then the complete file in one ```python block."]
    return [Message("system", SYSTEM_PROMPT), Message("user", "\n".join(parts))]


def first_turn_messages(user_prompt: str) -> list[Message]:
    """The first-turn chat around a stored user prompt (``Candidate.prompt`` of a turn-0 candidate):
    what ``build_prompt`` sent, since the system message is the same for every task."""
    return [Message("system", SYSTEM_PROMPT), Message("user", user_prompt)]


def build_repair_turn(verdict: Verdict, backend: str = "") -> Message:
    """The next user turn after a failed candidate: what the verifier found, and what to do."""
    status = verdict.status or "fail"
    head = f"Your candidate did not pass the verifier (stage reached: {verdict.stage_reached}, status: {status})."
    if verdict.correct and not verdict.status.startswith(("pass",)):
        head = f"Your candidate was correct but was rejected (status: {status})."
    body = verdict.feedback.strip() or "No further diagnostics were given."
    extra = []
    if verdict.max_abs_err is not None and not verdict.correct:
        extra.append(f"Largest absolute error: {verdict.max_abs_err:.3g}.")
    if verdict.fallback_ops:
        extra.append("Forbidden PyTorch compute found: " + ", ".join(verdict.fallback_ops) + ".")
    return Message("user", "\n\n".join([head, "Verifier feedback:\n" + body, *extra,
                                        "Fix the problem and answer with the complete corrected file "
                                        "in one ```python block."]))


def reasoning_of_response(response: str) -> str:
    """The text a response puts before its first code block, stripped ("" when there is none)."""
    idx = (response or "").find("```")
    text = response if idx < 0 else response[:idx]
    return (text or "").strip()
