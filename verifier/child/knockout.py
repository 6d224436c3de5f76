"""The knockout run's side in the execution child (the partial policy; verifier/judge/knockout.py runs and judges
it). On cuda ``knockout_shim.c`` loaded into the candidate's process rewrites the launch slots of each of the
candidate's extensions as it is loaded. On cpu there is no launch to skip: each call of the candidate's own
extension functions (the counted wrapper of verifier/child/worker.py) runs on copies of its arguments, so that no
write it makes reaches the caller, and hands back what a call that did no work would (``knocked_out``): its input
passed through where an argument has the result's shape, else zeros. What was skipped is written as evidence. Imports: the standard library (torch inside the cpu wrapper only).
"""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path

MARKER_FILE = "knockout.json"  # written by the verifier: this job is a knockout run (the shim's path, or calls mode)
RESULT_FILE = "knockout_result.json"  # written by the child: what the shim rewrote and skipped


class ChildKnockout:
    """The shim in an execution child whose job is a knockout run: rewrites the launch slots of each of the
    candidate's extensions as it is loaded, and reports what it skipped. Never raises into the candidate's
    import: a failure is recorded and makes the knockout inconclusive."""

    def __init__(self, shim_path: str, error: str = "", *, calls: bool = False, keep_scalars: bool = False):
        self.libraries: list[str] = []
        self.patched = 0
        self.errors: list[str] = [error] if error else []
        self.lib = None
        self.calls = calls  # cpu: the own functions' calls are knocked out (knock_call), no shim
        self.keep_scalars = keep_scalars  # their Python integers and booleans handed back as they were (knocked_out)
        self.call_counts: dict[str, int] = {}
        if not shim_path:
            return
        try:
            self.lib = ctypes.CDLL(shim_path)
            self.lib.km_knockout_patch.argtypes = [ctypes.c_char_p]
            self.lib.km_knockout_name.restype = ctypes.c_char_p
            self.lib.km_knockout_error.restype = ctypes.c_char_p
            self.lib.km_knockout_skipped.restype = ctypes.c_long
            self.lib.km_knockout_redirected.restype = ctypes.c_long
        except (OSError, AttributeError) as e:
            self.lib = None
            self.errors.append(f"the knockout shim did not load: {e}")

    @classmethod
    def from_job_dir(cls, job_dir: Path) -> "ChildKnockout | None":
        """The knockout of this job, or None when it is not a knockout run. Removes the marker (the candidate,
        imported after this, finds no file that names the run)."""
        marker = Path(job_dir) / MARKER_FILE
        if not marker.is_file():
            return None
        try:
            spec = json.loads(marker.read_text())
            knock = cls("", calls=True, keep_scalars=spec.get("keep_scalars") is True) if spec.get("calls") is True \
                else cls(str(spec["shim"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            knock = cls("", f"unreadable {MARKER_FILE}: {e}")
        marker.unlink(missing_ok=True)
        return knock

    def skip_launches_of(self, so_path: str) -> None:
        """Rewrite the launch slots of the loaded library ``so_path`` (the candidate's built extension)."""
        self.libraries.append(so_path)
        if self.lib is None:
            return
        try:
            n = self.lib.km_knockout_patch(os.fsencode(so_path))
        except Exception as e:  # noqa: BLE001 - never into the candidate's import
            self.errors.append(f"patching {so_path} failed: {e}")
            return
        if n < 0:
            self.errors.append((self.lib.km_knockout_error() or b"").decode(errors="replace"))
        else:
            self.patched += n

    def knock_call(self, name: str, fn, args: tuple, kwargs: dict):
        """One call of the candidate's own function ``name`` knocked out (cpu): run on copies of its tensor
        arguments (a write into an output argument reaches only the copy) and its result handed back wrong in every
        value (``knocked_out``), with the shape, dtype and device it had."""
        from verifier.child.timing import clone  # torch: here, where the child has it loaded

        self.call_counts[name] = self.call_counts.get(name, 0) + 1
        result = fn(*[clone(a) for a in args], **{k: clone(v) for k, v in kwargs.items()})
        return knocked_out(result, [*args, *kwargs.values()], keep_scalars=self.keep_scalars)

    def skipped(self) -> dict[str, int]:
        if self.calls:
            return {k: v for k, v in self.call_counts.items() if v}
        if self.lib is None:
            return {}
        counts = {self.lib.km_knockout_name(i).decode(): int(self.lib.km_knockout_skipped(i))
                  for i in range(self.lib.km_knockout_entries())}
        return {k: v for k, v in counts.items() if v}

    def write_result(self, job_dir: Path) -> None:
        redirected = int(self.lib.km_knockout_redirected()) if self.lib is not None else 0
        (Path(job_dir) / RESULT_FILE).write_text(json.dumps({
            "libraries": self.libraries, "patched": self.patched, "skipped": self.skipped(),
            "redirected": redirected, "errors": self.errors}))


def knocked_out(x, args: list = (), keep_scalars: bool = False):
    """What a call that did no work would have handed back in place of ``x``, its structure kept: each tensor
    replaced by a copy of the call's first tensor argument of the same shape, dtype and device (the call passed its
    input through), or by zeros where no argument has its shape (nothing computed); integers and booleans of a
    tensor with no matching argument by their bitwise complement; a Python float NaN, an int its complement, a
    bool its negation; lists and tuples element by element; anything else as it is. NaN alone was not enough: a
    pass-through (``y * 1``) or a zero added (``y + f(y)[0] * 0``) beside PyTorch doing the work made every
    NaN reach the output, so the own function "contributed" what it never computed. ``keep_scalars``: Python integers
    and booleans as they are (a size, an index, a flag: only the data the call made is knocked out); a float is a
    value the call computed (a loss, a norm handed back as a Python number and made a tensor by ``torch.tensor``),
    knocked out as ever."""
    import torch

    if isinstance(x, torch.Tensor):
        for a in args:
            if isinstance(a, torch.Tensor) and a.shape == x.shape and a.dtype == x.dtype and a.device == x.device:
                return a.detach().clone()
        if x.is_floating_point() or x.is_complex():
            return torch.zeros_like(x)
        return torch.bitwise_not(x)
    if keep_scalars and isinstance(x, (bool, int)):
        return x
    if isinstance(x, bool):
        return not x
    if isinstance(x, int):
        return ~x
    if isinstance(x, float):
        return float("nan")
    if isinstance(x, (list, tuple)):
        return type(x)(knocked_out(v, args, keep_scalars) for v in x)
    return x
