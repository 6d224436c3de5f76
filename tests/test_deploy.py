"""Deployments on a real Prefect server: `prefect server start` as a subprocess, a process work
pool, the flows deployed from this checkout (`kernelmill deploy`'s code path and prefect.yaml),
a run triggered with parameters, a worker that executes it, and its output files checked."""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from flows_fixtures import ROOT
from kernelmill import store
from kernelmill.config import DATA_DIR

POOL = "kernelmill-test-pool"
SEEDS = ["level1/1_ReLU.py", "level1/4_Sigmoid.py", "level2/12_Scale_Add_Tanh.py"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A Prefect server process with its own home and database; stopped after the module."""
    home = tmp_path_factory.mktemp("prefect-server-home")
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = dict(os.environ, PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_LOGGING_LEVEL="WARNING", PREFECT_SERVER_UI_ENABLED="false")
    env.pop("PREFECT_API_URL", None)
    log = open(home / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                             "--port", str(port), "--no-ui"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + 180
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("prefect server did not start:\n" + (home / "server.log").read_text()[-3000:])
        time.sleep(0.5)
    client_env = dict(os.environ, PREFECT_API_URL=url, PREFECT_HOME=str(tmp_path_factory.mktemp("client-home")),
                      PYTHONPATH=str(ROOT))
    yield url, client_env
    os.killpg(proc.pid, 15)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
    log.close()


@pytest.fixture
def api(server):
    """Point this process's Prefect client at the server for the test."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: server[0]}):
        yield server


def test_deploy_and_run_with_parameters_on_a_process_worker(api, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    from flows.commands import deploy_flows

    url, env = api
    seeds = tmp_path / "seeds"
    for rel in SEEDS:
        (seeds / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA_DIR / "seed_tasks" / rel, seeds / rel)
    out = tmp_path / "run"

    names = deploy_flows(["load", "e2e"], POOL, deployment_name="test")
    assert names == ["kernelmill-load/test", "kernelmill-e2e/test"]
    with get_client(sync_client=True) as client:
        assert client.read_work_pool(POOL).type == "process"
        dep = client.read_deployment_by_name("kernelmill-load/test")
        assert dep.work_pool_name == POOL and dep.entrypoint == "flows/stages.py:load_flow"

    # triggered with parameters; timeout=0 returns the scheduled run without waiting
    params = {"out": str(out), "overrides": {"load.dir": str(seeds)}}
    run = run_deployment("kernelmill-load/test", parameters=params, timeout=0)
    worker = subprocess.run([sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--run-once",
                             "--type", "process"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=400)
    with get_client(sync_client=True) as client:
        deadline = time.monotonic() + 120
        state = client.read_flow_run(run.id).state
        while not state.is_final() and time.monotonic() < deadline:
            time.sleep(1)
            state = client.read_flow_run(run.id).state
        artifacts = client.read_artifacts()
    assert state.is_completed(), f"{state}\n--- worker ---\n{worker.stdout[-3000:]}\n{worker.stderr[-3000:]}"
    assert run.parameters == params

    # the flow ran in the worker's subprocess and wrote the run directory named by the parameters
    raw = store.read_records(out / "raw", "tasks")
    assert sorted(t.name for t in raw) == sorted(Path(r).stem for r in SEEDS)
    assert {t.level for t in raw} == {1, 2}
    keys = {a.key for a in artifacts}
    assert {"kernelmill-load-counts", "kernelmill-load-summary"} <= keys


def documented_lines(doc: Path, heading: str, starts: tuple[str, ...]) -> list[str]:
    """The shell lines of ``doc``'s section ``heading`` that start with one of ``starts``, as written."""
    text = doc.read_text()
    section = text[text.index(heading):]
    section = section[:section.find("\n## ", 1) if "\n## " in section[1:] else None]
    return [line.strip() for line in section.splitlines() if line.strip().startswith(starts)]


def run_line(line: str, env: dict) -> subprocess.CompletedProcess:
    """One documented command line through bash, from the repository root (its comment included)."""
    return subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_readme_quick_start_deploys_every_flow_and_runs_again(api):
    """The README's Prefect quick-start, its lines run literally (from the README) against a fresh server: the
    work pool command, then `prefect deploy --all` (prefect.yaml), which creates a deployment per flow on the
    process pool; the pool command works a second time too, and so does docs/DEPLOY.md's GPU limit line."""
    from prefect.client.orchestration import get_client

    from flows.commands import ENTRYPOINTS
    from flows.stages import GPU_LIMIT

    url, env = api
    env = {**env, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    pool, deploy = documented_lines(ROOT / "README.md", "## Deploying with Prefect",
                                    ("prefect work-pool create", "prefect deploy "))
    assert "--overwrite" in pool and deploy.startswith("prefect deploy --all")
    for line in (pool, pool, deploy.replace("prefect deploy", "prefect --no-prompt deploy", 1)):
        res = run_line(line, env)
        assert res.returncode == 0, line + "\n" + res.stdout[-3000:] + res.stderr[-3000:]
    with get_client(sync_client=True) as client:
        deps = {d.name: d for d in client.read_deployments()}
        assert client.read_work_pool("kernelmill-process").type == "process"
    for name, entrypoint in ENTRYPOINTS.items():
        assert deps[name].entrypoint == entrypoint
        assert deps[name].work_pool_name == "kernelmill-process"
    assert deps["verify"].parameters == {"out": "runs/default", "backend": "auto"}

    (gcl,) = documented_lines(ROOT / "docs" / "DEPLOY.md", "## 3. Start a worker", ("prefect gcl",))
    for _ in range(2):  # creates it, then updates it
        res = run_line(gcl, env)
        assert res.returncode == 0, gcl + "\n" + res.stdout[-3000:] + res.stderr[-3000:]
    with get_client(sync_client=True) as client:
        assert client.read_global_concurrency_limit_by_name(GPU_LIMIT).limit == 8


def test_serve_runs_a_triggered_flow_on_this_box(api, tmp_path):
    """`kernelmill serve`: no pool, no worker; the serving process executes the triggered run."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    url, env = api
    seeds = tmp_path / "seeds" / "level1"
    seeds.mkdir(parents=True)
    shutil.copy(DATA_DIR / "seed_tasks" / SEEDS[0], seeds)
    out = tmp_path / "served"
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "serve", "--flows", "load", "--limit", "1"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with get_client(sync_client=True) as client:
            deadline = time.monotonic() + 180
            while True:  # the deployment appears once the serving process has registered it
                try:
                    client.read_deployment_by_name("kernelmill-load/serve")
                    break
                except Exception:
                    assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
                    time.sleep(1)
        run = run_deployment("kernelmill-load/serve", parameters={"out": str(out), "overrides": {"load.dir": str(seeds.parent)}},
                             timeout=240)
        assert run.state.is_completed(), (str(run.state), (tmp_path / "serve.log").read_text()[-3000:])
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
        log.close()
    assert [t.name for t in store.read_records(out / "raw", "tasks")] == ["1_ReLU"]


def test_deploy_names_the_checkout_it_runs_from(tmp_path, monkeypatch):
    """`kernelmill deploy` run inside another clone records that clone (where its worker will run), not the
    directory the package happens to be installed from; outside any checkout, the installed one."""
    from flows.commands import checkout_root
    from kernelmill.config import REPO_ROOT

    clone = tmp_path / "clone"
    for d in ("orchestrator", "flows", "data/seed_tasks"):
        (clone / d).mkdir(parents=True)
    (clone / "prefect.yaml").write_text("deployments: []\n")
    monkeypatch.chdir(clone / "data" / "seed_tasks")
    assert checkout_root() == clone.resolve()
    monkeypatch.chdir(tmp_path)
    assert checkout_root() == REPO_ROOT
