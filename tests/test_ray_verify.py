"""The verify stage spread over a real local Ray cluster (2 CPUs): compile tasks on CPU, verifier
calls on several Ray workers, verdicts written by the stage as they arrive."""

import pytest

from flows_fixtures import CANDIDATES, FAST_VERIFY, seed_run_dir, table_digest
from kernelmill import store
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
    assert "ray" not in again  # no stats: ray_verify_batch was not called with anything to submit
    assert table_digest(run_dir, "verdicts") == before
