"""The precompiled header of a build's binding file (verifier/build/pch.py): a real cpu build compiles its binding
file against it and yields a working module; the flags it is keyed by are read as the compile command reads them
(KernelBench's blank template flags keep it); a build never waits for one, and one it finds missing is made in the
background below the builds; ``pch = false`` turns it off."""

import json
import os
import sys
from pathlib import Path

import pytest

from verifier.build.pch import ensure_pch
from verifier.build.pool import build_blocking
from verifier.common.spec import canonical_spec, spec_key
from verifier.common.config import VerifyConfig


def test_cpu_build_uses_the_precompiled_header(tmp_path, with_pch):
    from verifier.build.pch import ensure_boxed_module
    from verifier.build.slim import SLIM_HEADERS
    from verifier.child.loading import load_so

    src = "#include <torch/extension.h>\ntorch::Tensor twice(torch::Tensor x) { return x.mul(2); }"
    spec = {"cpp_sources": src, "functions": ["twice"], "extra_cflags": ["-O2"]}
    # the headers of the suite's fixtures' flags made first, waited for: a build does not wait for one that another
    # test worker is making now (test_a_build_does_not_wait_for_a_header_another_build_is_making)
    root = Path(with_pch.host().pch_dir)
    assert ensure_pch(canonical_spec(spec), root) is not None and ensure_boxed_module(canonical_spec(spec), root)
    for header in SLIM_HEADERS.values():
        ensure_pch(canonical_spec(spec), root, header)
    res = build_blocking(tmp_path, spec, 600, host=with_pch.host())
    assert res.ok, res.log[-2000:]
    assert res.variant == "split_cpp" and res.pch, res.log[-2000:]  # its code in a host unit, the binding boxed
    assert json.loads((tmp_path / res.key / "result.json").read_text())["pch"] is True
    sigs = [p.read_text() for p in with_pch.pch_root().glob("*/signature.json")]
    assert any('"-O2"' in s and "extension.h" in s for s in sigs)
    import torch

    mod = load_so(f"km_{res.key}", res.so_path)
    assert torch.equal(mod.twice(torch.ones(3)), torch.full((3,), 2.0))


def test_blank_and_joined_flags_are_read_as_the_compile_command_reads_them():
    """torch joins a flag list with spaces into the ninja file and the shell splits its commands: ``""`` is no flag
    (KernelBench's template passes ``extra_cflags=[""], extra_ldflags=[""]``: 81 of the 145 real-batch candidates
    with an extension at a2864d2, each of which lost the precompiled header and every shared object), and
    ``"-O3 --use_fast_math"`` is two flags, each one the object cache allows; a flag the cache refuses refuses
    the spec however it is joined."""
    from verifier.build.objcache import cacheable

    template = canonical_spec({"cpp_sources": "int f();", "functions": ["f"], "extra_cflags": [""],
                               "extra_cuda_cflags": ["  "], "extra_ldflags": [""]})
    assert template == canonical_spec({"cpp_sources": "int f();", "functions": ["f"]})
    assert spec_key(template) == spec_key({"cpp_sources": "int f();", "functions": ["f"]})
    assert cacheable(template)
    assert cacheable({"extra_cuda_cflags": ["-O3 --use_fast_math", "-lineinfo"], "extra_cflags": ["-O3  -funroll-loops"]})
    for refused in (["-O3 -I/tmp"], ["-O3 -Xcompiler -fplugin=x.so"], ["-O3", "-include /tmp/h.h"], ["-O3 '-DX=1'"]):
        assert not cacheable({"extra_cflags": refused}), refused
    assert not cacheable({"extra_include_paths": [""]})  # ``-I`` with nothing after it takes the next word


def test_the_template_s_blank_flags_keep_the_precompiled_header_and_the_boxed_binding(tmp_path, with_pch):
    from verifier.build.pch import ensure_boxed_module, ensure_pch
    from verifier.build.slim import SLIM_CPU_HEADER

    src = "#include <torch/extension.h>\ntorch::Tensor twice(torch::Tensor x) { return x.mul(2); }"
    spec = {"cpp_sources": src, "functions": ["twice"], "extra_cflags": [""], "extra_ldflags": [""]}
    # the headers made first, waited for: a build does not wait for one another test worker is making now. Only the
    # slim head a C++-only build's host unit starts with (split_cpp): the CUDA head under these C++-only flags only
    # fails (no cuda.h on their include path), and its failed directory took one of the run's PCH_MAX_FLAG_SETS
    # (verifier/build/pch.py), which at e514965 left the teacher's -O3 host units without their slim header
    root = Path(with_pch.host().pch_dir)
    assert ensure_pch(canonical_spec(spec), root) is not None and ensure_boxed_module(canonical_spec(spec), root)
    ensure_pch(canonical_spec(spec), root, SLIM_CPU_HEADER)
    res = build_blocking(tmp_path, spec, 600, host=with_pch.host())
    assert res.ok and res.variant == "split_cpp" and res.pch, res.log[-2000:]
    report = json.loads((tmp_path / res.key / "split_cpp" / "compile.json").read_text())
    assert report["binding"] == "boxed" and report["objects_reused"] >= 1, report


def test_a_build_does_not_wait_for_a_header_another_build_is_making(tmp_path):
    """While one build makes a precompiled header (a cold machine: about 90 s of its two cores), the others go on
    without it, as with ``pch = false``, and say so in their result; none waits for the header's lock."""
    import fcntl
    import hashlib
    import time

    from verifier.build.pch import pch_signature

    root = tmp_path / "pch"
    args = {"cpp_sources": "int64_t seven() { return 7; }", "functions": ["seven"]}
    spec = canonical_spec(args)
    d = root / hashlib.sha256(pch_signature(spec).encode()).hexdigest()[:16]  # torch/extension.h's, these flags
    d.mkdir(parents=True)
    with open(d / ".lock", "w") as maker:  # another build is making it
        fcntl.flock(maker, fcntl.LOCK_EX)
        t0 = time.monotonic()
        assert ensure_pch(spec, root, wait=False) is None and time.monotonic() - t0 < 1.0
        res = build_blocking(tmp_path / "builds", args, 600, host=VerifyConfig(pch_dir=str(root)).host())
        assert res.ok and res.pch is False, res.log[-2000:]
        assert not (d / "ok").exists()  # nothing was built there behind the maker's back
    import torch  # noqa: F401 - the module's init needs torch's libraries loaded

    from verifier.child.loading import load_so

    assert load_so(f"km_{res.key}", res.so_path).seven() == 7


def test_a_missing_header_is_made_in_the_background_below_the_builds_and_no_build_waits_for_it(tmp_path):
    """A build that finds no precompiled header for its flags goes on without it and starts making it in the
    background (a thread of this process, once per flag set), its compiler at the lowest priority, below the
    builds' COMPILE_NICE: on a cold 2-core machine the first build used to make it itself, so its verdict waited for
    the header while the header's compile ran above every build. A background compile ended because this process
    exits is not a failure: the header is made again next time (never remembered as ``failed``)."""
    import fcntl
    import threading
    import time

    from verifier.build import pch
    from verifier.build.steps import COMPILE_NICE

    nice_now = [sys.executable, "-c", "import os; print(os.nice(0))"]
    assert int(pch._compile(nice_now, background=True).stdout) == pch.BACKGROUND_NICE > COMPILE_NICE
    assert int(pch._compile(nice_now, background=False).stdout) == os.nice(0)

    root = tmp_path / "pch"
    args = {"cpp_sources": "int64_t eight() { return 8; }", "functions": ["eight"]}
    res = build_blocking(tmp_path / "builds", args, 600, host=VerifyConfig(pch_dir=str(root)).host())
    assert res.ok and res.pch is False, res.log[-2000:]
    d = pch._header_dir(canonical_spec(args), root)
    deadline = time.monotonic() + 120
    while not pch._BACKGROUND and not (d / "ok").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pch._BACKGROUND or (d / "ok").exists(), "no header was started for the build's flags"
    if pch._BACKGROUND:  # being made: its lock is held, by the background thread
        with open(d / ".lock", "w") as probe:
            with pytest.raises(BlockingIOError):
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        pch._end_background()  # as when the process exits
        for t in [t for t in threading.enumerate() if t.name == "km-pch-background"]:
            t.join(60)
        assert not (d / "failed").exists() and not (d / "ok").exists(), sorted(p.name for p in d.iterdir())


def test_pch_false_turns_the_header_off(tmp_path):
    # with [verify] pch = false no PCH is made or looked up, though pch_dir names a directory
    host = VerifyConfig(pch=False, pch_dir=str(tmp_path)).host()
    assert host.pch_dir == ""
    res = build_blocking(tmp_path / "builds", {"cpp_sources": "int64_t three() { return 3; }",
                                               "functions": ["three"]}, 600, host=host)
    assert res.ok and res.pch is False, res.log[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["builds"]
