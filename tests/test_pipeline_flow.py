"""The walking skeleton through a real Prefect flow run: seed tasks -> teacher cpu candidates ->
cpu verifier -> repair -> corpora, with real compiled kernels, real Parquet, DuckDB and datasets."""

import shutil

import duckdb
import pytest

from kernelmill.config import DATA_DIR, latest_run

SEEDS = ["level1/1_ReLU.py", "level2/12_Scale_Add_Tanh.py"]


@pytest.fixture(scope="module")
def flow_run(prefect_server, tmp_path_factory):
    from flows.pipeline import e2e_flow

    seeds = tmp_path_factory.mktemp("seeds")
    for rel in SEEDS:
        (seeds / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA_DIR / "seed_tasks" / rel, seeds / rel)
    out = tmp_path_factory.mktemp("run")
    overrides = {"load.dir": str(seeds), "mine.source": "", "nnsmith.n": 0,
                 "generate.samples_per_task": 1, "generate.bug_rate": 1.0, "repair.max_turns": 2,
                 "verify.timing_trials": 5, "verify.time_torch_compile": False}
    state = e2e_flow(out=str(out), backend="cpu", overrides=overrides, return_state=True)
    return out, state


def test_flow_completes_and_leaves_the_latest_run_alone(flow_run):
    """A flow (here as a worker would run it) is no run a user started: `kernelmill query`'s default
    stays the latest run started by the CLI from the working directory (tests/test_query_default_run.py)."""
    out, state = flow_run
    assert state.is_completed(), state
    assert latest_run() != out.resolve()


def test_tables_are_parquet_that_duckdb_reads(flow_run):
    out, state = flow_run
    con = duckdb.connect()
    n_tasks = con.sql(f"select count(*) from read_parquet('{out}/tasks/*.parquet')").fetchall()[0][0]
    assert n_tasks == len(SEEDS)
    rows = con.sql(f"""select d.task_id, d.num_turns, d.solved, d.first_turn_reward, d.final_reward
                       from read_parquet('{out}/dialogues/*.parquet') d""").fetchall()
    assert len(rows) == len(SEEDS)
    # every first turn carried a planted bug (bug_rate 1.0), the repair turn fixed it
    for _, turns, solved, first, final in rows:
        assert turns == 2 and solved and final > first
    verdicts = con.sql(f"select correct, compiled, runtime_us, eager_us from read_parquet('{out}/verdicts/*.parquet')").fetchall()
    assert len(verdicts) == 2 * len(SEEDS)
    assert sum(v[0] for v in verdicts) == len(SEEDS)
    assert all(v[2] > 0 and v[3] > 0 for v in verdicts if v[0])


def test_sft_table_loads_with_datasets(flow_run):
    import datasets

    out, _ = flow_run
    ds = datasets.load_dataset("parquet", data_files={"train": f"{out}/sft/*.parquet"}, split="train")
    assert len(ds) == len(SEEDS)
    roles = [m["role"] for m in ds[0]["messages"]]
    assert roles[-1] == "assistant" and "user" in roles


def test_summary_is_computed_from_the_files(flow_run):
    from orchestrator.pipeline import summarize

    out, state = flow_run
    text = summarize(out)
    assert state.result()["summary"] == text
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["level", "tasks", "candidates"]
    assert len(lines) == 2 + 2  # header, rule, level 1 and level 2
