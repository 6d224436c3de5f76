"""The verifier's settings as its modules name them, and the one backend resolver.

The ``[verify]`` section's dataclass ``VerifyConfig`` and its host part ``HostSettings`` live with every other
section in kernelmill/settings.py (one settings system; defaults are written there only); they are named here as
well because every verifier module reads them from here. The verifier reads no variable of its own. What an
execution child needs travels in its ``Job`` (verifier/common/contract.py, whose defaults are copied from
VerifyConfig's). The host settings (``VerifyConfig.host()``: caches, sandbox, job files) are no process-wide
state: verify_batch hands its config's to the compile pool, sandboxes, fork servers and job directories it uses, each
of which takes them as an argument, so two configs in one process never see each other's. Torch-free at import.
"""

from __future__ import annotations

from kernelmill.errors import InputError
from kernelmill.settings import (CUDA_SLOTS_MAX, HostSettings, VerifyConfig,  # noqa: F401 (named here)
                                 usable_cores)

BACKENDS = ("cpu", "cuda")  # musa is planned


def resolve_backend(backend: str, where: str = "--backend", *, device_index: bool = False) -> str:
    """The one backend resolver (stages, verifier, trainer): ``auto`` is cuda when torch sees a CUDA device, else
    cpu; cpu and cuda are checked. InputError naming ``where`` (the flag or setting it came from) otherwise.
    ``device_index``: a trainer's device may name one GPU (``cuda:1``), which must exist."""
    import torch  # about 2 s: only callers about to verify or train pay for it

    if backend == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device_index and backend.startswith("cuda:") and backend[5:].isdigit():
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if int(backend[5:]) >= n:
            raise InputError(where, f"{backend!r}: this machine has {n} CUDA device(s) visible to torch")
        return backend
    if backend not in BACKENDS:
        raise InputError(where, f"unknown backend {backend!r}; use cpu, cuda or auto (musa is planned)")
    if backend == "cuda" and not torch.cuda.is_available():
        raise InputError(f"{where} cuda", "no CUDA device is visible to torch on this machine")
    return backend
