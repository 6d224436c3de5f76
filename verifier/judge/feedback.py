"""Stage 7b, feedback: a natural-language diagnosis a repair turn can quote as the next user message.

Each helper returns plain sentences; ``compose`` puts the verdict's headline first, then the details,
and ends with what to do. Nothing here decides an outcome; it only explains one.
"""

from __future__ import annotations

import re

from verifier import cheats

HEADLINES = {
    "pass": "Your kernel is correct and passed every legality check.",
    "extract_error": "I could not find a usable candidate in your answer.",
    "illegal": "Your program breaks the rules for candidates.",
    "cheat": "Your program was rejected by the anti-cheat checks.",
    "compile_error": "Your extension failed to compile.",
    "crash": "Your kernel crashed while running.",
    "timeout": "Your kernel did not finish in time.",
    "wrong": "Your kernel runs but its output is wrong.",
}
ADVICE = {
    "extract_error": "Reply with one ```python block that defines class ModelNew(nn.Module) and builds its kernel "
                     "with torch.utils.cpp_extension.load_inline.",
    "illegal": "Keep all computation inside your own native kernel; use PyTorch only to allocate (torch.empty) "
               "and reshape (view, contiguous).",
    "cheat": "Compute the result in your own kernel, on the inputs you are given, every call; use PyTorch only "
             "to allocate and reshape.",
    "compile_error": "Fix the first compiler error above; later errors often follow from it.",
    "crash": "Check bounds on every index, the sizes you allocate, and that every pointer you write through is valid.",
    "timeout": "Look for loops whose bound never changes, and blocking waits.",
    "wrong": "Check indexing, bounds for sizes that are not multiples of your tile, and the reduction order.",
}


def describe_mismatch(m: dict, shape: tuple, label: str) -> str:
    share = 100.0 * m["n_bad"] / max(m["numel"], 1)
    s = (f"{label}: {m['n_bad']} of {m['numel']} elements ({share:.1f}%) differ from the reference "
         f"(output shape {list(shape)}); max abs error {m['max_abs']:.3g}, max rel error {m['max_rel']:.3g}.")
    if "first_index" in m:
        s += f" First mismatch at index {list(m['first_index'])}: got {m['got']:.6g}, expected {m['expected']:.6g}."
    return s


def describe_cheats(codes: list[str]) -> list[str]:
    return [f"Anti-cheat {cheats.describe(c)}." for c in codes]


def compose(status: str, details: list[str], extra_advice: str = "") -> str:
    """The full feedback text: headline, details (deduplicated, in order), advice."""
    seen, lines, per_kind = set(), [HEADLINES.get(status, status)], {}
    for d in details:
        d = d.strip()
        # the same finding on every trial is said twice at most ("Trial 3: ..." ~ "Trial 1: ...")
        kind = re.sub(r"^(Trial \d+|Extra-shape trial \([^)]*\)|Timed iteration \d+): ", "", d)[:60]
        if not d or d in seen or per_kind.get(kind, 0) >= 2:
            continue
        seen.add(d)
        per_kind[kind] = per_kind.get(kind, 0) + 1
        lines.append(d)
    if len(lines) > 14:
        lines = lines[:14] + [f"(and {len(lines) - 14} more findings of the same kinds)"]
    advice = extra_advice or ADVICE.get(status, "")
    if advice:
        lines.append(advice)
    return "\n".join(lines)
