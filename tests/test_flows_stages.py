"""Per-stage Prefect flows run for real (ephemeral server from conftest): what they write, the
artifacts they publish, the GPU concurrency limit, and the CLI's progress bar (more: tests/test_progress.py). Kept to stages
that compile nothing (the Ray, resume and e2e tests compile)."""

import io
import shutil

import pytest

from flows_fixtures import seed_run_dir
from kernelmill import store
from kernelmill.config import DATA_DIR

SEEDS = ["level1/1_ReLU.py", "level1/4_Sigmoid.py", "level2/12_Scale_Add_Tanh.py"]


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    d = tmp_path_factory.mktemp("seeds")
    for rel in SEEDS:
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA_DIR / "seed_tasks" / rel, d / rel)
    return d


def _artifacts(key_prefix: str, naming: str = ""):
    """The server's artifacts under a key prefix whose data names ``naming`` (this test's run directory or
    seed folder): under xdist another module's flows publish the same keys on the session's server."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return [a for a in client.read_artifacts()
                if (a.key or "").startswith(key_prefix) and naming in str(a.data)]


def test_load_then_annotate_flows_write_raw_then_annotated_tasks(prefect_server, seeds, tmp_path):
    from flows.stages import annotate_flow, load_flow

    out = tmp_path / "run"
    counts = load_flow(out=str(out), overrides={"load.dir": str(seeds)})
    assert counts == {"dir": str(seeds), "tasks": 3, "not_kernelbench": [], "written": 3}
    assert len(store.read_records(out / "raw", "tasks")) == 3
    assert not (out / "tasks").exists()  # loading does not annotate

    a = annotate_flow(out=str(out))
    assert a["annotated"] == 3 and a["annotate_failures"] == 0 and a["written"] == 3
    tasks = store.read_records(out, "tasks")
    assert {t.name for t in tasks} == {"1_ReLU", "4_Sigmoid", "12_Scale_Add_Tanh"}
    assert all(t.input_specs and t.output_specs and t.flops > 0 for t in tasks)
    # again: nothing left to annotate, nothing written twice
    assert annotate_flow(out=str(out))["written"] == 0
    assert len(store.read_records(out, "tasks")) == 3

    summary = _artifacts("kernelmill-annotate-summary", naming=str(out))
    assert summary and all("| tasks | 3 |" in a.data for a in summary)
    counts_tables = _artifacts("kernelmill-load-counts", naming=str(seeds))
    assert counts_tables and "seed" in counts_tables[0].data


def test_verify_flow_holds_the_gpu_limit_and_publishes_progress(prefect_server, tmp_path):
    """Candidates that stop at the static stage: real verifier, nothing to compile."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    from flows.stages import GPU_LIMIT, verify_flow

    with get_client(sync_client=True) as client:  # another module's flow on this session's server may have made it
        try:
            client.delete_global_concurrency_limit_by_name(GPU_LIMIT)
        except ObjectNotFound:
            pass
    seed_run_dir(tmp_path, ["torch_fallback"])
    counts = verify_flow(out=str(tmp_path), overrides={"flows.gpu_concurrency": 2}, backend="cpu")
    assert counts == {"candidates": 1, "verified": 1, "reused": 0, "correct": 0, "written": 1}
    (v,) = store.read_records(tmp_path, "verdicts")
    assert v.status == "cheat" and v.cheats
    with get_client(sync_client=True) as client:
        limit = client.read_global_concurrency_limit_by_name(GPU_LIMIT)
    assert limit.limit == 2 and limit.active_slots == 0  # created on first use, released after
    progress = [a for a in _artifacts("") if a.type == "progress"]
    assert any(a.data == 100.0 for a in progress)


def test_progress_bar_draws_each_stage(tmp_path):
    from rich.console import Console

    from kernelmill.config import load_settings
    from orchestrator.pipeline import run_stages
    from orchestrator.progress import StageProgress

    seed_run_dir(tmp_path, ["torch_fallback"])  # stops at the static stage: no compile
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=100)
    with StageProgress(console=console):
        run_stages(tmp_path, load_settings(), ["verify"])
    text = buf.getvalue()
    assert "verify" in text and "1/1" in text
    assert "[verify] started" in text and "[verify] done in" in text  # printed above the bar
