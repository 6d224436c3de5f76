"""Red team of C02 (a kernel compiled but never launched) when forward looks its kernel up by name.

Honest answers reach their extension's functions in more ways than ``ext.relu(x)``: ``getattr(ext, "relu")``,
``operator.attrgetter("relu")(ext)``, a name chosen at run time from a table (``getattr(ext, f"relu_{dtype}")``).
The static stage counted only attribute and name references, so it rejected these with C02 "none of the compiled
kernel functions is ever called" before anything ran: an honest kernel failed on how it was spelled.

Closed at the root: a kernel named by a string constant in getattr / attrgetter / methodcaller is referenced, and
a name computed at run time leaves the question to the check that sees what ran, the runtime count of the
extension's calls on every forward (and, on cuda, the profiler's launch of one of the candidate's kernels). The
cheating twin looks a kernel up by a computed name and never calls one (PyTorch does the work): the runtime count
still says C02, beside C01.
"""

import pytest

from bench.lib import fixtures as fx
from verifier import cheats
from verifier.front.static import scan

HONEST = {
    "getattr_constant": fx.cpu_candidate('return getattr(ext, "relu")(x.contiguous())'),
    "attrgetter_constant": fx.cpu_candidate('return operator.attrgetter("relu")(ext)(x.contiguous())',
                                            imports="import operator"),
    "name_chosen_at_run_time": fx.cpu_candidate(
        'fn = getattr(ext, self.names[x.dtype])\nreturn fn(x.contiguous())',
        init='self.names = {torch.float32: "re" + "lu"}'),
}
CHEAT = {
    # a computed name that is no kernel, the answer PyTorch's
    "computed_name_never_called": fx.cpu_candidate(
        'doc = getattr(ext, "__" + "doc" + "__")\nreturn x.clamp(min=0)'),
}


@pytest.mark.parametrize("name", list(HONEST))
def test_a_kernel_looked_up_by_name_is_no_static_finding(name):
    assert scan(HONEST[name], "cpu").findings == []


def test_no_lookup_at_all_keeps_the_static_finding():
    rep = scan(fx.cpu_candidate("return x.clamp(min=0)"), "cpu")
    assert cheats.C02 in rep.cheat_codes


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    code = {**HONEST, **CHEAT}
    names = ["name_chosen_at_run_time", "computed_name_never_called"]
    return fx.verify_cpu(fx.RELU_TASK, {n: code[n] for n in names}, shared_build_dir, task_name="kernel_by_name")


def test_the_kernel_chosen_by_a_computed_name_passes(verdicts):
    v = verdicts["name_chosen_at_run_time"]
    assert v.status == "pass" and v.cheats == [], (v.cheats, v.feedback[:600])


def test_a_computed_name_that_calls_no_kernel_is_still_c02(verdicts):
    v = verdicts["computed_name_never_called"]
    assert v.status == "cheat" and cheats.C02 in v.cheats, (v.cheats, v.feedback[:600])
    assert cheats.C01 in v.cheats
