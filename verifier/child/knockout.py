"""The knockout run's side in the execution child (the partial policy, cuda; verifier/judge/knockout.py runs and
judges it): ``knockout_shim.c`` loaded into the candidate's process rewrites the launch slots of each of the
candidate's extensions as it is loaded, and what it skipped is written as evidence. Imports: the standard library.
"""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path

MARKER_FILE = "knockout.json"  # written by the verifier: this job is a knockout run (the shim's path)
RESULT_FILE = "knockout_result.json"  # written by the child: what the shim rewrote and skipped


class ChildKnockout:
    """The shim in an execution child whose job is a knockout run: rewrites the launch slots of each of the
    candidate's extensions as it is loaded, and reports what it skipped. Never raises into the candidate's
    import: a failure is recorded and makes the knockout inconclusive."""

    def __init__(self, shim_path: str, error: str = ""):
        self.libraries: list[str] = []
        self.patched = 0
        self.errors: list[str] = [error] if error else []
        self.lib = None
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
            knock = cls(str(json.loads(marker.read_text())["shim"]))
        except (OSError, ValueError, KeyError, TypeError) as e:
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

    def skipped(self) -> dict[str, int]:
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
