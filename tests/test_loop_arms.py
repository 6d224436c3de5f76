"""The loop's ablation arms as settings (loop.arm, kernelmill.settings.LOOP_ARMS; applied by
orchestrator.loop.with_arm): each arm is loop.train and one RL stabiliser switch, whatever else is set."""

import pytest

from kernelmill.config import load_settings
from kernelmill.errors import InputError
from kernelmill.settings import LOOP_ARMS
from orchestrator.loop import with_arm


def test_an_arm_sets_what_a_round_trains_and_switches_one_stabiliser_off():
    s = with_arm(load_settings(None, {"loop.arm": "rl_no_retry", "loop.train": "rft", "train.mirrorpop": False}))
    assert s.loop.train == "rl" and s.train.retry is False and s.train.prime_echo is True
    assert s.train.mirrorpop is True  # arms differ in one switch: the others are on
    assert with_arm(load_settings(None, {"loop.arm": "rft"})).loop.train == "rft"
    assert with_arm(load_settings(None, {"loop.arm": "rl_no_mirrorpop"})).train.mirrorpop is False
    plain = load_settings(None, {"loop.train": "rft+rl", "train.retry": False})
    assert with_arm(plain) is plain  # no arm: the settings as given
    assert set(LOOP_ARMS) == {"rft", "rl", "rl_no_prime_echo", "rl_no_retry", "rl_no_mirrorpop"}


def test_loop_bench_arm_run_again_under_a_tag_has_the_arms_settings():
    """``rl_no_retry@b``: the arm again under its own name (a before/after pair on one m0), with its settings."""
    a = with_arm(load_settings(None, {"loop.arm": "rl_no_retry@b"}))
    b = with_arm(load_settings(None, {"loop.arm": "rl_no_retry"}))
    assert a.train == b.train and a.loop.train == b.loop.train == "rl"
    assert a.train.retry is False and a.train.prime_echo is True


def test_an_unknown_arm_is_refused_with_the_choices():
    with pytest.raises(InputError, match="loop.arm"):
        load_settings(None, {"loop.arm": "rl_no_everything"})
