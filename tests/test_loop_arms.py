"""The loop benchmark's ablation arms (bench/lib/loop_arms.py): each arm is loop.train and one RL stabiliser switch,
whatever else is set; the product's settings know no arm."""

import dataclasses

import pytest

from bench.lib.loop_arms import LOOP_ARMS, with_arm
from kernelmill.config import load_settings
from kernelmill.errors import InputError
from kernelmill.settings import LoopSettings


def test_an_arm_sets_what_a_round_trains_and_switches_one_stabiliser_off():
    s = with_arm(load_settings(None, {"loop.train": "rft", "train.mirrorpop": False}), "rl_no_retry")
    assert s.loop.train == "rl" and s.train.retry is False and s.train.prime_echo is True
    assert s.train.mirrorpop is True  # arms differ in one switch: the others are on
    assert with_arm(load_settings(None, {}), "rft").loop.train == "rft"
    assert with_arm(load_settings(None, {}), "rl_no_mirrorpop").train.mirrorpop is False
    plain = load_settings(None, {"loop.train": "rft+rl", "train.retry": False})
    assert with_arm(plain, "") is plain  # no arm: the settings as given
    assert set(LOOP_ARMS) == {"rft", "rl", "rl_no_prime_echo", "rl_no_retry", "rl_no_mirrorpop"}


def test_loop_bench_arm_run_again_under_a_tag_has_the_arms_settings():
    """``rl_no_retry@b``: the arm again under its own name (a before/after pair on one m0), with its settings."""
    a = with_arm(load_settings(None, {}), "rl_no_retry@b")
    b = with_arm(load_settings(None, {}), "rl_no_retry")
    assert a.train == b.train and a.loop.train == b.loop.train == "rl"
    assert a.train.retry is False and a.train.prime_echo is True


def test_an_unknown_arm_is_refused_with_the_choices():
    with pytest.raises(InputError, match="rl_no_everything.*known: rft, rl"):
        with_arm(load_settings(None, {}), "rl_no_everything")


def test_the_products_loop_settings_know_no_arm():
    assert "arm" not in {f.name for f in dataclasses.fields(LoopSettings)}
    with pytest.raises(InputError, match="loop.arm"):
        load_settings(None, {"loop.arm": "rl"})
