"""The verify stage spread over a real local Ray cluster (2 CPUs) by the one entry's Ray engine
(verifier/ray_pool.py): compile tasks on CPU, verifier calls on several Ray workers, verdicts written by
the stage as they arrive; a Ray worker killed while it verifies a chunk (SIGKILL from outside, as the OOM
killer or a lost GPU would end it) costs a retry, never a verdict."""

import collections
import os
import signal
import threading
import time

import psutil
import pytest

from flows_fixtures import CANDIDATES, FAST_VERIFY, MEASURED, make_candidates, relu_task, seed_run_dir, table_digest
from kernelmill import store
from kernelmill.schema import to_row
from orchestrator import stages
from kernelmill.config import load_settings

# flows.ray_address sends the verify stage's work to the cluster ray.init() started below
ON_RAY = {**FAST_VERIFY, "flows.ray_address": "auto", "flows.ray_workers": 2}

NAMES = ["honest", "honest_named", "torch_fallback"]


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024 * 1024, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def ray_run(ray_cluster, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("ray-run")
    cands = seed_run_dir(run_dir, NAMES)
    settings = load_settings(overrides={**ON_RAY, "flows.verify_flush_rows": 1})
    seen = []
    counts = stages.verify(run_dir, settings, lambda stage, done, total: seen.append((stage, done, total)))
    return run_dir, cands, counts, counts["ray"], seen


def test_every_candidate_gets_the_right_verdict(ray_run):
    run_dir, cands, counts, _, _ = ray_run
    assert counts["candidates"] == counts["verified"] == counts["written"] == len(NAMES)
    by_gen = {c.candidate_id: c.generator.split(":")[1] for c in cands}
    verdicts = store.read_records(run_dir, "verdicts")
    assert sorted(v.candidate_id for v in verdicts) == sorted(by_gen)
    for v in verdicts:
        assert v.correct == CANDIDATES[by_gen[v.candidate_id]][1], (by_gen[v.candidate_id], v.status, v.feedback)
    fallback = next(v for v in verdicts if by_gen[v.candidate_id] == "torch_fallback")
    assert fallback.status == "cheat" and fallback.cheats


def test_work_spread_over_several_ray_workers(ray_run):
    _, _, _, stats, _ = ray_run
    assert stats["cluster"]["CPU"] == 2
    assert stats["concurrency"] == 2
    assert stats["chunks"] == len(NAMES)
    # one distinct extension across the honest candidates: compiled once, by a CPU task
    assert stats["extensions"] == 1 and stats["compile_failures"] == 0
    assert len({pid for _, pid in stats["workers"]}) >= 2, stats["workers"]


def test_verdicts_written_incrementally_and_progress_reported(ray_run):
    run_dir, _, _, _, seen = ray_run
    # flush_rows=1: one part file per verdict, each written when its Ray task came back
    assert len(list((run_dir / "verdicts").glob("part-*.parquet"))) == len(NAMES)
    assert seen[0] == ("verify", 0, len(NAMES)) and seen[-1] == ("verify", len(NAMES), len(NAMES))
    assert [d for _, d, _ in seen] == list(range(len(NAMES) + 1))


def test_rerun_on_ray_verifies_nothing(ray_run):
    """A resumed verify stage finds every verdict stored and submits no Ray work."""
    run_dir, _, _, _, _ = ray_run
    before = table_digest(run_dir, "verdicts")
    again = stages.verify(run_dir, load_settings(overrides=ON_RAY))
    assert again["candidates"] == 0 and again["written"] == 0
    assert "ray" not in again  # no stats: nothing was submitted to the cluster
    assert table_digest(run_dir, "verdicts") == before


def test_the_rl_reward_of_a_round_on_the_same_settings_runs_on_the_cluster_and_judges_alike(ray_run, monkeypatch):
    """flows.ray_address sends the RL reward (what loop._rl hands train_rl) to the cluster through the same entry
    as the verify stage: nothing runs in this process, and the stage's candidates get the stage's verdicts."""
    from train.rollout import verifier_reward_fn
    from verifier import entry

    run_dir, cands, _, _, _ = ray_run
    settings = load_settings(overrides=ON_RAY)

    def in_this_process(*args, **kw):
        raise AssertionError("the reward was verified in this process, not on the cluster")

    monkeypatch.setattr(entry, "_run_local", in_this_process)
    reward = verifier_reward_fn("cpu", settings.verify,
                                ray=entry.ray_target(settings.flows.ray_address, settings.flows.ray_workers))
    task = relu_task()
    scores = reward([({"reference_code": task.reference_code, "task_id": task.task_id, "level": 1}, c.code)
                     for c in cands])
    stored = {v.candidate_id: v for v in store.read_records(run_dir, "verdicts")}
    same = lambda v: {k: x for k, x in to_row(v).items() if k not in MEASURED and k != "candidate_id"}  # noqa: E731
    assert [same(s.verdict) for s in scores] == [same(stored[c.candidate_id]) for c in cands]


# ---------------------------------------------------------------------------- a worker killed mid-chunk

VERIFY_TASK_TITLE = "ray::_verify_after_builds"  # Ray's process title while a worker runs a verify chunk
# the candidates that run (compile + execution child), so every chunk lasts seconds and a kill lands mid-chunk
RUNNING = ["honest", "honest_named", "hard_coded_rows"]


class ChunkKiller(threading.Thread):
    """Kills (SIGKILL) the first Ray worker of this test's cluster seen running a verify chunk for
    ``after_s`` seconds: outside the task, as a real failure would, not a hook inside kernelmill."""

    def __init__(self, after_s: float = 0.5):
        super().__init__(daemon=True)
        self.after_s, self.killed, self.stop = after_s, [], threading.Event()

    def run(self):
        me, first_seen = psutil.Process(os.getpid()), {}
        while not self.stop.is_set() and not self.killed:
            # only our own cluster's workers (descendants of this process): other Ray clusters may share the box
            for p in me.children(recursive=True):
                try:
                    title = " ".join(p.cmdline())
                except psutil.Error:
                    continue
                if title.startswith(VERIFY_TASK_TITLE):
                    t = first_seen.setdefault(p.pid, time.monotonic())
                    if time.monotonic() - t >= self.after_s:
                        os.kill(p.pid, signal.SIGKILL)
                        self.killed.append(p.pid)
                        break
            self.stop.wait(0.02)


@pytest.fixture(scope="module")
def killed_run(ray_cluster, tmp_path_factory):
    """The verify stage on Ray with one worker SIGKILLed mid-chunk, and the same stage run in this
    process (no Ray) on a copy of the same run directory."""
    ray_dir, local_dir = tmp_path_factory.mktemp("ray-killed"), tmp_path_factory.mktemp("one-process")
    cands = seed_run_dir(ray_dir, RUNNING)
    seed_run_dir(local_dir, RUNNING)
    # the extra-shape trial on (FAST_VERIFY turns it off): hard_coded_rows is then a C14 cheat in both runs
    local = stages.verify(local_dir, load_settings(overrides={**FAST_VERIFY, "verify.other_shape": True}))
    killer = ChunkKiller()
    killer.start()
    try:
        counts = stages.verify(ray_dir, load_settings(overrides={**ON_RAY, "flows.verify_flush_rows": 1,
                                                                 "verify.other_shape": True}))
    finally:
        killer.stop.set()
        killer.join()
    return ray_dir, local_dir, cands, counts, local, killer.killed


def test_killed_worker_loses_no_verdict_and_duplicates_none(killed_run):
    ray_dir, _, cands, counts, _, killed = killed_run
    assert len(killed) == 1, "the killer found no verify chunk to kill"
    ids = [v.candidate_id for v in store.read_records(ray_dir, "verdicts")]
    assert collections.Counter(ids) == collections.Counter(c.candidate_id for c in cands)  # each exactly once
    assert counts["verified"] == counts["written"] == len(RUNNING)
    stats = counts["ray"]
    assert stats["retries"] == 1 and stats["duplicates_dropped"] == 0 and stats["unjudged"] == 0
    assert stats["judged"] == len(RUNNING)
    (failure,) = stats["failures"]
    assert failure["retried"] and failure["attempt"] == 1 and "WorkerCrashedError" in failure["error"], failure
    # the killed chunk's retry came back from another process (the killed worker may have returned
    # an earlier chunk before it was killed, so it can be among stats["workers"])
    (retry,) = stats["retry_runs"]
    assert retry["chunk"] == failure["chunk"] and retry["attempt"] == 2
    assert retry["pid"] != killed[0], (retry, killed)


def test_killed_run_verdicts_equal_a_one_process_run(killed_run):
    ray_dir, local_dir, _, _, local, _ = killed_run
    assert local["verified"] == len(RUNNING) and "ray" not in local
    if table_digest(ray_dir, "verdicts") != table_digest(local_dir, "verdicts"):
        # name the differing columns, not only two hashes
        def rows(d):
            return {v.candidate_id: {k: x for k, x in to_row(v).items() if k not in MEASURED}
                    for v in store.read_records(d, "verdicts")}
        ray_rows, local_rows = rows(ray_dir), rows(local_dir)
        diff = {cid: {k: (r[k], local_rows[cid].get(k)) for k in r if r[k] != local_rows[cid].get(k)}
                for cid, r in ray_rows.items()}
        pytest.fail(f"ray vs one-process verdict columns differ: {diff}")
    by_id = {v.candidate_id: v for v in store.read_records(local_dir, "verdicts")}
    for v in store.read_records(ray_dir, "verdicts"):
        want = by_id[v.candidate_id]
        assert (v.status, v.correct, v.stage_reached) == (want.status, want.correct, want.stage_reached)
    by_gen = {c.candidate_id: c.generator.split(":")[1] for c in killed_run[2]}
    for v in store.read_records(ray_dir, "verdicts"):
        assert v.correct == CANDIDATES[by_gen[v.candidate_id]][1], (by_gen[v.candidate_id], v.status, v.cheats)


def test_chunk_out_of_attempts_raises_and_makes_up_no_verdict(ray_cluster):
    """max_attempts=1: the killed chunk is not retried; the other chunk's verdicts are handed out once,
    the killed chunk's candidates get none (a lost worker is never the candidate's verdict)."""
    from kernelmill.settings import parse_section
    from verifier.entry import RayTarget, VerifyStats, verify
    from verifier.ray_pool import RayVerifyError

    task = relu_task()
    items = [(task, c) for c in make_candidates(RUNNING + ["torch_fallback"])]
    cfg = parse_section("verify", {k.split(".", 1)[1]: v for k, v in FAST_VERIFY.items()}, "FAST_VERIFY")
    handed, stats = [], VerifyStats()
    killer = ChunkKiller()
    killer.start()
    try:
        with pytest.raises(RayVerifyError) as err:
            verify(items, config=cfg, ray=RayTarget("auto", workers=2, chunk=2, max_attempts=1), stats=stats,
                   on_verdict=lambda i, v: handed.append((i, v.candidate_id)))
    finally:
        killer.stop.set()
        killer.join()
    assert len(killer.killed) == 1
    summary = err.value.summary
    lost = set(summary.unjudged)
    assert len(lost) == 2 and summary.retries == 0 and len(summary.failures) == 1
    assert not summary.failures[0].retried and set(summary.failures[0].candidate_ids) == lost
    assert sorted(i for i, _ in handed) == sorted({i for i, (_, c) in enumerate(items) if c.candidate_id not in lost})
    assert all(items[i][1].candidate_id == cid for i, cid in handed)
    assert stats.ray["unjudged"] == 2 and set(stats.ray["unjudged_ids"]) == lost
    assert "2 candidate(s) unjudged" in str(err.value)


def test_a_chunk_answer_that_does_not_match_its_candidates_is_not_handed_out():
    """What a chunk returns is checked before any verdict is handed out: a short answer or a verdict
    in another candidate's place makes the attempt a failure (retried), never a misattributed verdict."""
    from kernelmill.schema import Verdict
    from verifier.ray_pool import _chunk_problem

    items = [(relu_task(), c) for c in make_candidates(RUNNING)]
    ids = [c.candidate_id for _, c in items]
    right = [Verdict(candidate_id=i) for i in ids]
    assert _chunk_problem(items, [0, 1, 2], right) == ""
    assert "2 verdicts for 3 candidates" in _chunk_problem(items, [0, 1, 2], right[:2])
    assert ids[0] in _chunk_problem(items, [0, 1, 2], [right[1], right[0], right[2]])
    assert _chunk_problem(items, [0, 1, 2], [right[0], None, right[2]])
