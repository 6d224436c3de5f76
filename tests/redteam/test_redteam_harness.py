"""The trusted harness (verifier/execute/harness.py) against compute servers that lie, on the cpu backend.

The harness runs in the verifier's process; a compute server asks it for clocked brackets over the job's channel.
Here the compute server is a thread of the test speaking the real protocol (verifier/child/harness_client.py, or raw
messages where the case needs to break it), so each class of lie is checked in milliseconds: the clock, the timed
outputs, the picks and the late writes are the harness's, whatever the server says or does to its own objects."""

import threading
import time

import pytest
import torch

from verifier.child.channel import Channel
from verifier.execute.channel import Driver
from verifier.execute.harness import Harness, null_for
from verifier.child.harness_client import BracketClient


def _draw(seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(32, 128, generator=g)]


def _session(tmp_path, serve, *, check=True, keep=3):
    """Run ``serve(client, channel)`` as the child against a real Driver + Harness; the harness's result."""
    h = Harness("cpu", tmp_path, torch.nn.ReLU, _draw, check=check, keep=keep, budget_s=5.0)
    d = Driver(tmp_path, n_trials=0, n_timing=0, on_bracket=h.serve)
    ch = Channel(tmp_path)
    try:
        serve(BracketClient(ch, "cpu"), ch)
    finally:
        ch.close()
        ledger = d.close()
    assert not ledger.harness_error, ledger.harness_error
    return h.close()


def test_an_honest_server_is_clocked_checked_and_sampled_by_the_harness(tmp_path):
    def serve(client, ch):
        for _ in range(4):
            client.bracket("candidate", torch.relu)

    got = _session(tmp_path, serve)
    assert len(got.brackets) == 4 and got.brackets[0].calls == 1  # a probe first, then as many calls as fit
    assert not got.problems and got.per_call_s("candidate") > 0
    assert len(got.kept) == 3
    for inputs, outs in got.kept:  # the picks are pairs the harness itself drew and read back
        assert torch.equal(outs[0], torch.relu(inputs[0]))


def test_a_server_that_skips_work_on_some_timed_calls_is_seen_on_every_call(tmp_path):
    """docs/ANTI_CHEAT.md class 28: the previous output returned at once on the calls it hopes are not checked; the
    harness checks every timed output itself, so there is no unchecked call to hide in."""
    cache = {}

    def lazy(x):
        if "y" not in cache:
            cache["y"] = torch.relu(x)
        return cache["y"]

    def serve(client, ch):
        for _ in range(4):
            client.bracket("candidate", lazy)

    got = _session(tmp_path, serve)
    assert got.problems and "differ from the answer" in got.problems[0]


def test_a_server_that_answers_done_without_the_work_has_wrong_outputs(tmp_path):
    """The clock stops at the server's answer, so an early answer is fast: but the outputs are read then."""
    def serve(client, ch):
        reply = ch.ask({"op": "bracket", "label": "candidate"})
        ch.ask({"op": "armed"})
        ch.ask({"op": "finished", "error": ""})  # nothing computed, nothing copied
        assert reply["calls"] == 1

    got = _session(tmp_path, serve)
    assert got.problems and "differ from the answer" in got.problems[0]


def test_outputs_written_after_done_are_seen(tmp_path):
    """docs/ANTI_CHEAT.md C09 across the boundary: work finished after the server said done (a thread it left
    running) lands in the pool after the harness's snapshot; the harness compares the pool with the snapshot
    again."""
    def serve(client, ch):
        client.bracket("candidate", torch.relu)
        pool, _ = client._map({"file": str(tmp_path / "harness_pool.bin"), "bytes": 0})
        pool[256:] = 7  # a late write over the pool's input and output sets (after the flag words)

    got = _session(tmp_path, serve)
    assert any("written after" in p for p in got.problems)


def test_the_servers_own_clock_changes_nothing(tmp_path, monkeypatch):
    """The server's process may make its clocks run 1000x slow or fast: the harness does not ask them."""
    import verifier.child.harness_client as hc

    def serve(client, ch):
        monkeypatch.setattr(hc, "torch", hc.torch)  # the server's module state is its own to change
        for _ in range(3):
            client.bracket("candidate", lambda x: (time.sleep(0.002), torch.relu(x))[1])

    got = _session(tmp_path, serve)
    # a 2 ms call is 2 ms by the harness's clock, whatever the server thinks of it
    assert got.per_call_s("candidate") >= 0.0015 and not got.problems


def test_the_null_bracket_is_linear_in_its_calls():
    assert null_for({1: 1.0, 9: 5.0}, 5) == pytest.approx(3.0)
    assert null_for({1: 1.0, 9: 5.0}, 9) == 5.0 and null_for({}, 4) == 0.0


def test_a_server_that_never_answers_does_not_hang_the_harness(tmp_path):
    """A child that dies mid-bracket: the driver's thread ends with the job, the harness's result stands."""
    done = threading.Event()

    def serve(client, ch):
        ch.ask({"op": "bracket", "label": "candidate"})
        done.set()  # and then nothing: the channel closes

    got = _session(tmp_path, serve)
    assert done.is_set() and not got.brackets
