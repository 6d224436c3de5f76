"""When a fast build variant fails, what is rebuilt (marker gpu: CUDA builds need a CUDA build of torch).

- A failed binding file (main.cpp) is final in the bare variant: the full build's main.cpp is the same
  bytes, so no full build runs and the verdict and its compiler message are the same.
- A failed bare CUDA object falls back to the full build by default; with ``full_build_fallback=False``
  it is final, marked ``fallback_skipped``, and its compiler message names the same line as the full
  build's (the bare prelude keeps the line numbers).
- The contract that switch states: the bare prelude includes the standard header of each name on its list that a
  torch-free source uses without including it (``std::vector``: it builds either way); a name off that list that
  only torch/types.h brings (``std::complex``, through c10/util/complex.h) builds with the fallback and fails without
  it (``std::unordered_map`` was that name until the list took it in, class 93).
Only the compile stage is judged here (no candidate runs)."""

import json
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pytest  # noqa: E402

from bench.lib import fixtures as fx  # noqa: E402
from kernelmill.schema import Candidate, Task  # noqa: E402
from verifier.build.variants import BARE_PRELUDE, bare_prelude  # noqa: E402
from verifier.engine import VerifyConfig, verify_batch  # noqa: E402

pytestmark = pytest.mark.gpu

GOOD = fx.cuda_relu_bare_candidate(910)
BINDING_ERROR = fx.cuda_relu_bare_candidate(911).replace("relu_launch(x.data_ptr", "relu_lauch(x.data_ptr")
CUDA_ERROR = fx.cuda_relu_bare_candidate(912).replace("y[i] = v > 0.0f ? v : 0.0f;", "y[i] = v > 0.0f ? v : w;")
NEEDS_VECTOR = fx.cuda_relu_bare_candidate(913).replace(
    "void relu_launch(", "static int block_size() { std::vector<int> b{256}; return b[0]; }\nvoid relu_launch(")
OFF_LIST = "static int block_size() { std::complex<float> b{256.0f, 0.0f}; return (int)b.real(); }\n"
NEEDS_OFF_LIST = fx.cuda_relu_bare_candidate(914).replace("void relu_launch(", OFF_LIST + "void relu_launch(")


def _verdicts(fallback: bool, build_dir: str) -> dict:
    task = Task.from_code(fx.CUDA_RELU_TASK, name="relu_cuda", source="seed", level=1)
    cases = {"good": GOOD, "binding_error": BINDING_ERROR, "cuda_error": CUDA_ERROR, "needs_vector": NEEDS_VECTOR,
             "needs_off_list": NEEDS_OFF_LIST}
    cfg = VerifyConfig(build_dir=build_dir, timing_trials=0, time_torch_compile=False, exec_workers=2,
                       full_build_fallback=fallback)
    items = [(task, Candidate(candidate_id=n, task_id=task.task_id, backend="cuda", generator="test", code=c))
             for n, c in cases.items()]
    return dict(zip(cases, verify_batch(items, config=cfg, compile_workers=os.cpu_count())))


def _build_of(build_dir: str, marker: str) -> Path:
    for key_dir in Path(build_dir).iterdir():
        spec = key_dir / "spec.json"
        if spec.is_file() and marker in spec.read_text():
            return key_dir
    raise AssertionError(f"no build with {marker} in {build_dir}")


@pytest.fixture(scope="module")
def runs():
    on, off = tempfile.mkdtemp(prefix="km-fb-on-"), tempfile.mkdtemp(prefix="km-fb-off-")
    return {"on": (on, _verdicts(True, on)), "off": (off, _verdicts(False, off))}


def _line_of(feedback: str) -> str:
    m = re.search(r"cuda\.cu\((\d+)\)", feedback)
    assert m, feedback
    return m.group(1)


def test_good_source_builds_bare_either_way(runs):
    for mode in ("on", "off"):
        d, v = runs[mode]
        assert v["good"].status == "pass", (mode, v["good"].feedback)
        assert json.loads((_build_of(d, "relu_bare_910") / "result.json").read_text())["variant"] == "bare"


def test_binding_file_error_is_final_in_the_bare_variant(runs):
    for mode in ("on", "off"):
        d, v = runs[mode]
        assert v["binding_error"].status == "compile_error" and "relu_lauch" in v["binding_error"].feedback
        key_dir = _build_of(d, "relu_bare_911")
        assert (key_dir / "bare").is_dir() and not (key_dir / "full").exists()
        assert "byte-identical" in (key_dir / "build.log").read_text()
        assert json.loads((key_dir / "result.json").read_text())["fallback_skipped"] is False


def test_cuda_object_error_falls_back_only_when_asked(runs):
    d_on, v_on = runs["on"]
    d_off, v_off = runs["off"]
    assert v_on["cuda_error"].status == v_off["cuda_error"].status == "compile_error"
    on_dir, off_dir = _build_of(d_on, "relu_bare_912"), _build_of(d_off, "relu_bare_912")
    assert (on_dir / "full").is_dir()  # the default: rebuilt unchanged, that log reported
    assert not (off_dir / "full").exists()
    assert json.loads((off_dir / "result.json").read_text())["fallback_skipped"] is True
    # the bare prelude keeps the full build's line numbers: both messages point at the same line
    assert _line_of(v_on["cuda_error"].feedback) == _line_of(v_off["cuda_error"].feedback)


def test_header_contract_without_the_fallback(runs):
    for mode in ("on", "off"):  # the prelude's std headers: bare either way
        v = runs[mode][1]["needs_vector"]
        assert v.status == "pass", (mode, v.feedback)
        assert json.loads((_build_of(runs[mode][0], "relu_bare_913") / "result.json").read_text())["variant"] == "bare"
        # timing is off in these runs: the feedback says so, not that timing failed
        assert "Timing failed" not in v.feedback and "timing_trials=0" in v.feedback, v.feedback
    assert bare_prelude([OFF_LIST]) == BARE_PRELUDE  # the name is off the list (a test of the contract, not the list)
    assert runs["on"][1]["needs_off_list"].status == "pass", runs["on"][1]["needs_off_list"].feedback
    off = runs["off"][1]["needs_off_list"]
    assert off.status == "compile_error" and "complex" in off.feedback, off.feedback
