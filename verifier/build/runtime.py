"""Builds a candidate's process asks for while it runs: a ``load_inline`` call whose arguments the static stage could
not read (a source made at run time, a name computed from a hash). The child never compiles: it sends the spec over
the job's channel and waits (verifier/child/loading.py); the verifier's side of the channel calls the builder made
here, which builds the spec in the verifier's own build root with the compile pool's code (``build_blocking``: the
same variants, the same build sandbox) after scanning its sources as the static stage scans a resolved spec's
(``scan_sources``, ``scan_tampering``: a spec they reject is not built), and scans the binary (``scan_binary``: the
compile pool's scans) before the child may load it. The findings go into the job's ledger as a ``ChildBuild`` (verifier/common/contract.py) and the
judge reads them there (verifier/judge/checks.py ``check_child_built``).

So the binary the verdict judges is the binary the verifier built from the sources it was sent: a build the
candidate ran itself could remove or replace its own binary before anything outside the process read it (the class
of docs/ANTI_CHEAT.md row 39). The sandbox makes the build root read-only to the child; ``sha256`` seals the binary
as built, for the judge to check where no sandbox does.

Enters: the spec (canonical load_inline arguments, as JSON) and the verify config. Leaves: a ChildBuild.
Imports: verifier.common, verifier.front and this package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from verifier.build.pool import build_blocking
from verifier.build.result import first_errors
from verifier.common import sandbox
from verifier.common.config import VerifyConfig
from verifier.common.contract import ChildBuild, file_seal
from verifier.common.spec import canonical_spec, spec_key
from verifier.front.binary import scan_binary, scan_tampering
from verifier.front.vendor import scan_sources

MAX_CHILD_BUILDS = 8  # builds one job may ask for; more is refused (a job that builds without end is not a kernel)
_SPEC_LISTS = ("cpp_sources", "cuda_sources", "extra_cflags", "extra_cuda_cflags", "extra_ldflags",
               "extra_include_paths")


def spec_from_request(got) -> dict:
    """The load_inline arguments a child sent, checked: a dict of the canonical spec's keys, lists of strings (and
    ``functions`` a list of names or a dict of name -> docstring, ``with_cuda`` a bool or None). Raises ValueError
    saying what is wrong."""
    if not isinstance(got, dict):
        raise ValueError("the build request carries no spec")
    spec = canonical_spec(got)
    for key in _SPEC_LISTS:
        if not all(isinstance(x, str) for x in spec[key]):
            raise ValueError(f"{key} holds something other than strings")
    fns = spec["functions"]
    if isinstance(fns, dict):
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in fns.items()):
            raise ValueError("functions maps names to something other than docstrings")
    elif not all(isinstance(x, str) for x in fns):
        raise ValueError("functions holds something other than names")
    if spec["with_cuda"] not in (None, True, False):
        raise ValueError("with_cuda is not a bool")
    return spec


def child_builder(build_root: Path, cfg: VerifyConfig) -> Callable[[int, object], ChildBuild]:
    """The channel's ``on_build`` for one job: ``build(n, spec)`` builds the child's ``n``-th request and scans it."""

    def build(n: int, got) -> ChildBuild:
        try:
            spec = spec_from_request(got)
        except ValueError as e:
            return ChildBuild(n=n, error=f"malformed build request: {e}")
        out = ChildBuild(n=n, key=spec_key(spec), sources=spec["cpp_sources"] + spec["cuda_sources"],
                         ldflags=list(spec["extra_ldflags"]))
        if n >= MAX_CHILD_BUILDS:
            out.error = f"more than {MAX_CHILD_BUILDS} extensions built at run time by one job"
            return out
        # the sources first, as the static stage scans a resolved spec's: what they name is decided without a build
        out.vendor, out.tamper = scan_sources(out.sources, out.ldflags), scan_tampering(out.sources)
        if out.vendor or out.tamper:
            out.error = "not built: the verifier's checks of its sources rejected it"
            return out
        # no code locks here (HostSettings.code_locks): the candidate's own process asked for this build mid-run and
        # holds its share of the device lock already; a timer waiting at the lock's turnstile would hold this import
        # check back while the child holds the timer back, until both bounded waits ran out
        res = build_blocking(build_root, spec, cfg.compile_timeout_s, cfg.full_build_fallback, host=cfg.host())
        if res.verifier_error:
            out.verifier_error = res.verifier_error
            return out
        out.escapes = sandbox.escape_findings(Path(build_root) / out.key)
        if not res.ok:
            out.error = ("the build sandbox blocked the module's own code: " + "; ".join(out.escapes)) if out.escapes \
                else first_errors(res.log)
            return out
        out.ok, out.so_path, out.sha256 = True, res.so_path, file_seal(Path(res.so_path))
        found = scan_binary([res.so_path], out.sources)
        out.vendor, out.tamper, out.compute = found.vendor, found.tamper, found.compute
        return out

    return build
