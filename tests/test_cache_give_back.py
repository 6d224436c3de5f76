"""The verifier gives the device cache back only where no clocked bracket of its process is in flight
(verifier/execute/locks.py ``give_back_cache``, ``bracket_in_flight``).

``torch.cuda.empty_cache`` frees through cudaFree, which waits for every stream of the process while it holds the
allocator's lock and the interpreter's; a bracket's stream waits on a word its harness's thread writes from Python
after queuing. At 92b516b an H100's real batch stopped after its first candidate: the engine's preparation threads
gave the cache back after each reference timing while another thread's bracket was queued. The device is not needed
to show the rule: ``empty_cache`` is recorded here, the brackets are held by threads as the harness holds them."""

import threading
import time
from pathlib import Path

import pytest
import torch

from verifier.execute import locks

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def emptied(monkeypatch):
    calls: list[tuple[float, int]] = []  # (when, brackets in flight then)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append((time.monotonic(), locks.brackets_in_flight())))
    return calls


def _bracket(opened: threading.Event, release: threading.Event, ended: list) -> threading.Thread:
    def run():
        with locks.bracket_in_flight():
            opened.set()
            release.wait(30)
        ended.append(time.monotonic())
    t = threading.Thread(target=run)
    t.start()
    assert opened.wait(30)
    return t


def test_with_no_bracket_in_flight_the_cache_goes_back(emptied):
    assert locks.give_back_cache("cuda") is True
    assert [n for _, n in emptied] == [0]
    assert locks.give_back_cache("cpu") is False and len(emptied) == 1  # no cache on the cpu


def test_a_bracket_in_flight_keeps_the_cache_until_it_ends(emptied):
    opened, release, ended = threading.Event(), threading.Event(), []
    t = _bracket(opened, release, ended)
    try:
        assert locks.give_back_cache("cuda", wait_s=0.2) is False  # the bracket stayed open: kept this time
        assert emptied == []
        threading.Timer(0.3, release.set).start()
        assert locks.give_back_cache("cuda", wait_s=30) is True  # waits for it, then gives back
    finally:
        release.set()
        t.join()
    assert len(emptied) == 1 and emptied[0][1] == 0 and emptied[0][0] >= ended[0]


def test_no_bracket_starts_while_the_cache_goes_back(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    inside, leave, seen = threading.Event(), threading.Event(), []

    def slow_empty():
        inside.set()
        leave.wait(30)
        seen.append(("emptied", time.monotonic()))

    monkeypatch.setattr(torch.cuda, "empty_cache", slow_empty)
    giver = threading.Thread(target=locks.give_back_cache, args=("cuda",))
    giver.start()
    assert inside.wait(30)

    def bracket():
        with locks.bracket_in_flight():
            seen.append(("bracket", time.monotonic()))

    b = threading.Thread(target=bracket)
    b.start()
    time.sleep(0.2)
    assert seen == []  # the bracket waits for the give-back
    leave.set()
    giver.join()
    b.join()
    assert [k for k, _ in seen] == ["emptied", "bracket"]


def test_the_verifier_empties_the_cache_in_one_place():
    hits = [str(p.relative_to(ROOT)) for p in (ROOT / "verifier").rglob("*.py")
            if "empty_cache()" in p.read_text() and p.name != "locks.py"]
    assert hits == [], hits
    harness = (ROOT / "verifier" / "execute" / "harness.py").read_text()
    assert "with bracket_in_flight():" in harness
