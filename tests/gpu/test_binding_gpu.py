"""One binding object for answers of boxed signatures on real CUDA builds (marker gpu: CUDA builds need a CUDA build
of torch). Two honest answers that name their host function and its parameter differently share one binding
object (the boxed module object); an answer whose declaration the CUDA object does not define fails as it does with the file compiled as
written; every verdict is the one the build without the canonical form gives (``[verify] canonical_binding = false``).
The builds here are not split (``split_build = false``): the split variant puts the CUDA source's host code into the
binding file (verifier/build/split.py), which then has no canonical form; the canonical object serves sources that
are not split and those built after a failed split."""

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pytest  # noqa: E402

from bench.lib import fixtures as fx  # noqa: E402
from kernelmill.schema import Candidate, Task  # noqa: E402
from verifier.engine import VerifyConfig, verify_batch  # noqa: E402

pytestmark = pytest.mark.gpu

CASES = {
    "named_relu_cuda": fx.cuda_relu_candidate(930),
    "named_my_relu": fx.cuda_relu_candidate(931).replace("relu_cuda", "my_relu").replace(
        'CPP_SRC = "torch::Tensor my_relu(torch::Tensor x);"',
        'CPP_SRC = "// host side\\nat::Tensor my_relu(at::Tensor input);"'),
    # declares a second parameter the CUDA source's function does not take: the module does not load
    "undefined_declaration": fx.cuda_relu_candidate(932).replace(
        'CPP_SRC = "torch::Tensor relu_cuda(torch::Tensor x);"',
        'CPP_SRC = "torch::Tensor relu_cuda(torch::Tensor x, int64_t n);"'),
}


def _verdicts(build_dir: str, canonical: bool) -> dict:
    task = Task.from_code(fx.CUDA_RELU_TASK, name="relu_cuda", source="seed", level=1)
    cfg = VerifyConfig(build_dir=build_dir, timing_trials=0, time_torch_compile=False, exec_workers=2,
                       canonical_binding=canonical, split_build=False)
    # the header and the boxed module object made first: a build does not wait for one being made, it goes on without
    # it (verifier/build/pch.py), and at f70c8a7, on a fresh H100 box, the first of the two boxed builds did so
    fx.make_headers(cfg, fx.CUDA_EXT_SPEC)
    items = [(task, Candidate(candidate_id=n, task_id=task.task_id, backend="cuda", generator="test", code=c))
             for n, c in CASES.items()]
    # one compile worker a case: the three full CUDA builds (split_build off: nvcc with torch's headers) at once, not
    # two and then one (this file alone took 276 s of one H100's tests/gpu at a6b853a, the two configs' rounds in turn)
    return dict(zip(CASES, verify_batch(items, config=cfg, compile_workers=len(CASES))))


def _reused(build_dir: str, marker: str) -> int:
    for key_dir in Path(build_dir).iterdir():
        spec = key_dir / "spec.json"
        if spec.is_file() and marker in spec.read_text():
            return json.loads((key_dir / "result.json").read_text())["objects_reused"]
    raise AssertionError(f"no build with {marker} in {build_dir}")


@pytest.fixture(scope="module")
def runs():
    on, off = tempfile.mkdtemp(prefix="km-bind-on-"), tempfile.mkdtemp(prefix="km-bind-off-")
    return {"on": (on, _verdicts(on, True)), "off": (off, _verdicts(off, False))}


def test_verdicts_are_those_of_the_file_as_written(runs):
    on, off = runs["on"][1], runs["off"][1]
    for name in CASES:
        assert (on[name].status, on[name].cheats) == (off[name].status, off[name].cheats), (
            name, on[name].feedback, off[name].feedback)
    assert on["named_relu_cuda"].status == on["named_my_relu"].status == "pass", on["named_my_relu"].feedback
    bad = on["undefined_declaration"]
    assert bad.status == "compile_error" and "relu_cuda" in bad.feedback, bad.feedback


def test_answers_differing_in_names_share_one_binding_object(runs):
    (on_dir, _), (off_dir, _) = runs["on"], runs["off"]
    # both declarations are of boxed types (verifier/build/boxed.py): each build took the one module object the
    # compile pool built beside the precompiled header, and neither compiled a binding file of its own (the markers
    # are the kernels' names: the load_inline name is not part of the build spec)
    assert _reused(on_dir, "relu_kernel_930") == _reused(on_dir, "relu_kernel_931") == 1
    assert _reused(off_dir, "relu_kernel_930") + _reused(off_dir, "relu_kernel_931") == 0  # as written: two binding files
