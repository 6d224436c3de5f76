"""The dispatch monitor's check of a host conversion of floating values to an integer or boolean dtype
(verifier/child/monitors.py ``rounds_host``) answers alike in the CPU sampler's C (cpu_sampler.c ``km_not_whole``,
used inside a sampled call, so that the check's time is nobody's compute) and with numpy (used where no sampler is
loaded): contiguous, strided, transposed and zero-dimensional tensors of float32, float64 and float16, with NaN, inf,
huge and negative values, to integers and to booleans. The end-to-end case, an honest conversion of whole values that
numpy's samples made C01, is tests/redteam/test_redteam_operator_routes.py's ``honest_whole_values_converted_large``."""

import pytest
import torch

from verifier.child.monitors import rounds_host
from verifier.child.sampler import Sampler
from verifier.judge import cpu_time


@pytest.fixture(scope="module")
def sampler(tmp_path_factory):
    s = Sampler(str(cpu_time.build(tmp_path_factory.mktemp("sampler"))))
    assert s.lib is not None, s.error
    return s


def _cases():
    g = torch.Generator().manual_seed(7)
    whole = torch.randint(-1000, 1000, (37, 53), generator=g).float()
    frac = whole.clone()
    frac[20, 40] += 0.25
    big = torch.tensor([2.0 ** 60, -(2.0 ** 53) - 2, 1e300, 3.0], dtype=torch.float64)
    out = {"whole": whole, "one_fraction": frac, "fraction_in_a_transposed_view": frac.t(),
           "strided_view_skipping_it": frac[::2, ::3], "strided_view_holding_it": frac[::4, ::8],
           "huge_values": big, "inf": torch.tensor([float("inf"), -float("inf"), 2.0]),
           "nan": torch.tensor([1.0, float("nan")]), "zero_dim_fraction": torch.tensor(0.5),
           "zero_dim_whole": torch.tensor(-3.0), "empty": torch.empty(0, 4),
           "bits_01": torch.tensor([0.0, 1.0, -0.0, 1.0]), "bits_with_2": torch.tensor([0.0, 2.0]),
           "half_fraction": (whole / 8).half(), "half_whole": whole.half()[:, 1::2],
           "half_subnormal": torch.tensor([6e-8, 0.0], dtype=torch.float16)}
    out["double_fraction"] = frac.double().t()[3:]
    return out


@pytest.mark.parametrize("name", sorted(_cases()))
@pytest.mark.parametrize("dtype", [torch.int32, torch.bool], ids=["to_int", "to_bool"])
def test_the_c_check_answers_as_numpy(sampler, name, dtype):
    src = _cases()[name]
    by_numpy = rounds_host(src, dtype)
    by_c = rounds_host(src, dtype, sampler)
    assert by_c == by_numpy, (name, dtype, by_c, by_numpy)


def test_the_cases_tell_both_answers_apart(sampler):
    answers = {name: rounds_host(src, torch.int32, sampler) for name, src in _cases().items()}
    assert answers["one_fraction"] and answers["fraction_in_a_transposed_view"] and answers["nan"]
    assert answers["strided_view_holding_it"] and not answers["strided_view_skipping_it"]
    assert not answers["whole"] and not answers["huge_values"] and not answers["inf"] and not answers["empty"]
    assert answers["half_fraction"] and not answers["half_whole"] and answers["half_subnormal"]
    assert rounds_host(_cases()["bits_with_2"], torch.bool, sampler) and \
        not rounds_host(_cases()["bits_01"], torch.bool, sampler)
