"""Red team of the strict policy's line between moving data and computing on it: ``F.pad`` with a constant fill.

Kernels that want aligned rows pad their input (``F.pad(x, (0, 24))``), run, and slice the answer back. A constant
pad is a new tensor holding x and the fill: data moved and nothing computed, as ``torch.cat`` with a filled block,
which the policy already allows. The static scan called every ``F.*`` PyTorch compute and the runtime allowlist
(verifier/common/ops.py) lacked ``constant_pad_nd``, so the honest answer was C01 under strict.

Closed at the root, on both sides: the static scan allows ``F.pad`` whose mode is the constant one (the default, or
written ``mode="constant"``) and ``torch.constant_pad_nd``; the runtime allowlist has ``constant_pad_nd`` (and
``pad``, the composite the profiler records around it; a gathering mode still shows its own op).
The cheating twins keep C01: the other modes gather (reflect, replicate, circular: ``reflection_pad*`` ops), and a
mode the scan cannot read (a variable) is judged as compute.

The other side of the same line (class 66): copies are allowed, so a task whose whole work is data movement (a pixel
shuffle, a transpose) passed the strict policy on the cpu backend with the answer made by ``permute().contiguous()``
and the own function only checking the input (reward 2.6 at 3x): on cpu the one condition on own work was that an
own function was called (on cuda the device time in the candidate's kernels decides). Now, where forward's only
PyTorch ops beside its own calls are allowed ones and some of them made tensor data (``ops.MOVES_DATA``: copies,
cat, a constant pad), the knockout run asks whose data the output is: its own calls' tensors knocked out (their
Python numbers, a size worked out, kept), still correct is C02. Honest twin: a kernel that is handed a transposed
copy and whose result is transposed back passes (without the kernel's data the output is wrong).
"""

import pytest

from bench.lib import fixtures as fx
from verifier import cheats
from verifier.front.static import scan

PAD = "import torch.nn.functional as F"
BACK = "\nreturn ext.relu(xp.contiguous())[:, :x.shape[1]].contiguous()"
HONEST = {
    "constant_pad_default": fx.cpu_candidate("xp = F.pad(x, (0, 24))" + BACK, imports=PAD),
    "constant_pad_named": fx.cpu_candidate('xp = F.pad(x, (0, 24), mode="constant", value=0.0)' + BACK, imports=PAD),
    "constant_pad_nd": fx.cpu_candidate("xp = torch.constant_pad_nd(x, (0, 24))" + BACK),
}
CHEAT = {
    "reflect_pad": fx.cpu_candidate('xp = F.pad(x.unsqueeze(0), (0, 24), mode="reflect").squeeze(0)' + BACK,
                                    imports=PAD),
    "replicate_positional": fx.cpu_candidate('xp = F.pad(x.unsqueeze(0), (0, 24), "replicate").squeeze(0)' + BACK,
                                             imports=PAD),
    "mode_in_a_variable": fx.cpu_candidate('m = "reflect"\nxp = F.pad(x.unsqueeze(0), (0, 24), mode=m).squeeze(0)'
                                           + BACK, imports=PAD),
}


@pytest.mark.parametrize("name", list(HONEST))
def test_a_constant_pad_is_no_static_finding(name):
    assert scan(HONEST[name], "cpu").findings == []


@pytest.mark.parametrize("name", list(CHEAT))
def test_a_gathering_pad_is_pytorch_compute(name):
    assert cheats.C01 in scan(CHEAT[name], "cpu").cheat_codes


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    code = {**HONEST, **CHEAT}
    names = ["constant_pad_default", "reflect_pad"]
    return fx.verify_cpu(fx.RELU_TASK, {n: code[n] for n in names}, shared_build_dir, task_name="data_movement")


def test_the_constant_pad_passes_strict_end_to_end(verdicts):
    v = verdicts["constant_pad_default"]
    assert v.status == "pass" and v.cheats == [], (v.cheats, v.feedback[:600])


def test_the_reflect_pad_is_seen_at_run_time_too(verdicts):
    v = verdicts["reflect_pad"]
    assert v.status == "cheat" and cheats.C01 in v.cheats, (v.cheats, v.feedback[:600])
    assert "reflection_pad" in v.feedback  # the runtime monitor's op, not only the static finding


TRANSPOSE_TASK = fx.RELU_TASK.replace("return torch.relu(x)", "return x.t().contiguous()")


@pytest.fixture(scope="module")
def moved_verdicts(shared_build_dir):
    transposed = fx.verify_cpu(TRANSPOSE_TASK, {"copy_is_the_answer": fx.cpu_candidate(
        "ext.touch(x.contiguous())\nreturn x.t().contiguous()")}, shared_build_dir, task_name="transpose")
    honest = fx.verify_cpu(fx.RELU_TASK, {"kernel_between_copies": fx.cpu_candidate(
        "xt = x.t().contiguous()\nreturn ext.relu(xt).t().contiguous()")}, shared_build_dir, task_name="relu_moved")
    return {**transposed, **honest}


def test_pytorchs_copies_as_the_whole_answer_are_c02_under_strict(moved_verdicts):
    v = moved_verdicts["copy_is_the_answer"]
    assert v.status == "cheat" and cheats.C02 in v.cheats, (v.status, v.cheats, v.feedback[:600])
    assert v.versions["knockout"]["outcome"] == "no_contribution" and "PyTorch's copies" in v.feedback


def test_a_kernel_between_copies_passes(moved_verdicts):
    v = moved_verdicts["kernel_between_copies"]
    assert v.status == "pass" and v.cheats == [], (v.status, v.cheats, v.feedback[:600])
    assert v.versions["knockout"]["outcome"] == "contributes"
