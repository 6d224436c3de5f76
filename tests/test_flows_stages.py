"""Per-stage Prefect flows run for real (ephemeral server from conftest): what they write, the
artifacts they publish, result caching of the gatherers, the GPU concurrency limit, and the CLI's
progress bar. Kept to stages that compile nothing (the Ray, resume and e2e tests compile)."""

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


def _artifacts(key_prefix: str):
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return [a for a in client.read_artifacts() if (a.key or "").startswith(key_prefix)]


def _task_runs(flow_run_id):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        return client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))


def test_load_then_annotate_flows_write_raw_then_annotated_tasks(prefect_server, seeds, tmp_path):
    from flows.stages import annotate_flow, load_flow

    out = tmp_path / "run"
    counts = load_flow(out=str(out), source=str(seeds))
    assert counts == {"source": str(seeds), "seed": 3, "written": 3}
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

    summary = [a for a in _artifacts("kernelmill-annotate-summary")]
    assert summary and "| tasks | 3 |" in summary[0].data
    counts_tables = _artifacts("kernelmill-load-counts")
    assert counts_tables and "seed" in counts_tables[0].data


def test_gatherer_result_is_cached_across_runs_and_invalidated_by_content(prefect_server, seeds, tmp_path):
    from flows.stages import load_flow

    first = load_flow(out=str(tmp_path / "a"), source=str(seeds), return_state=True)
    second = load_flow(out=str(tmp_path / "b"), source=str(seeds), return_state=True)
    assert second.result()["written"] == 3  # the cached tasks are still written into the new run
    gather = [t for t in _task_runs(second.state_details.flow_run_id) if t.name.startswith("gather-seed")]
    assert [t.state.name for t in gather] == ["Cached"]

    (seeds / "level1" / "4_Sigmoid.py").write_text(
        (seeds / "level1" / "4_Sigmoid.py").read_text().replace("torch.sigmoid(x)", "torch.sigmoid(x) * 2"))
    third = load_flow(out=str(tmp_path / "c"), source=str(seeds), return_state=True)
    gather = [t for t in _task_runs(third.state_details.flow_run_id) if t.name.startswith("gather-seed")]
    assert [t.state.name for t in gather] == ["Completed"]
    ids_a = store.stored_ids(tmp_path / "a" / "raw", "tasks")
    ids_c = store.stored_ids(tmp_path / "c" / "raw", "tasks")
    assert len(ids_a & ids_c) == 2 and len(ids_c) == 3
    assert first.is_completed()


def test_verify_flow_holds_the_gpu_limit_and_publishes_progress(prefect_server, tmp_path):
    """Candidates that stop at the static stage: real verifier, nothing to compile."""
    from prefect.client.orchestration import get_client

    from flows.stages import GPU_LIMIT, verify_flow

    seed_run_dir(tmp_path, ["torch_fallback"])
    counts = verify_flow(out=str(tmp_path), overrides={"flows.gpu_concurrency": 2})
    assert counts == {"candidates": 1, "verified": 1, "correct": 0, "written": 1}
    (v,) = store.read_records(tmp_path, "verdicts")
    assert v.status == "cheat" and v.cheats
    with get_client(sync_client=True) as client:
        limit = client.read_global_concurrency_limit_by_name(GPU_LIMIT)
    assert limit.limit == 2 and limit.active_slots == 0  # created on first use, released after
    progress = [a for a in _artifacts("") if a.type == "progress"]
    assert any(a.data == 100.0 for a in progress)


def test_progress_bar_draws_each_stage(tmp_path):
    from rich.console import Console

    from flows.commands import ProgressBar
    from kernelmill.config import load_config
    from kernelmill.pipeline import stage_verify

    seed_run_dir(tmp_path, ["torch_fallback"])  # stops at the static stage: no compile
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=100)
    with ProgressBar(console=console):
        stage_verify(tmp_path, load_config())
    text = buf.getvalue()
    assert "verify" in text and "1/1" in text


def test_run_stages_cli_rejects_unknown_stage(capsys):
    from kernelmill.cli import main

    assert main(["run", "--stages", "verify,bogus", "--no-prefect"]) == 2
    assert "bogus" in capsys.readouterr().err


def test_ray_flag_needs_the_verify_stage(capsys):
    from kernelmill.cli import main

    assert main(["run", "--ray", "local", "--no-prefect"]) == 2
    assert "--ray local" in capsys.readouterr().err
