"""One way into verification (issue 36): the verify stage, the RL reward of a loop round and `kernelmill verify`
all reach the verifier through verifier.entry.verify, and only the entry runs an engine (the local compile and
execution pool, verifier.engine.verify_batch, or the Ray pool, verifier/ray_pool.py).

Real components: the cpu verifier compiles and runs the fixtures' kernels (one shared C++ extension for both
tasks); the engines are wrapped, not replaced, to count what reaches them. The Ray dispatch of the same paths is
checked on a real cluster in tests/test_ray_verify.py."""

import ast
import json

import pytest

from flows_fixtures import FAST_VERIFY, MEASURED, ROOT
from bench.lib import fixtures as fx
from kernelmill import store
from kernelmill.config import load_settings
from kernelmill.schema import Task, to_row
from orchestrator import stages
from flows.cli import main
from synth.generate.generators import dialogue_id_for, make_candidate
from train.rollout import Policy, verifier_reward_fn
from verifier import entry

PRODUCT = ("kernelmill", "synth", "graphs", "curation", "verifier", "train", "orchestrator", "flows")
ENGINE_NAMES = {"verify_batch", "verify_on_ray", "_run_local", "_run_ray"}
# where an engine may be named: its definition (engine), the entry that dispatches, and the Ray pool whose workers
# run the local engine on the programs the entry handed it
ENGINE_HOMES = {"verifier/engine.py", "verifier/entry.py", "verifier/ray_pool.py"}


def _product_files():
    return sorted(p for pkg in PRODUCT for p in (ROOT / pkg).rglob("*.py"))


def _names(tree: ast.AST) -> set[str]:
    """Every name code refers to: variables, attributes, imported names and modules (not strings, comments)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            out |= {node.module or ""} | {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


def test_no_module_but_the_entry_calls_an_engine():
    """Grep-level (the AST of every product module): the local engine and the Ray pool are named only where
    they live and by the entry; ``verify_candidate`` is the entry's; nothing probes the verifier with hasattr."""
    offenders, defines_verify_candidate, probes = {}, [], []
    for path in _product_files():
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text())
        names = _names(tree)
        named = sorted((names & ENGINE_NAMES) | ({"verifier.ray_pool"} & names) | ({"ray_pool"} & names))
        if named and rel not in ENGINE_HOMES:
            offenders[rel] = named
        defines_verify_candidate += [rel for n in ast.walk(tree)
                                     if isinstance(n, ast.FunctionDef) and n.name == "verify_candidate"]
        probes += [rel for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "hasattr"
                   and n.args and ast.unparse(n.args[0]) in ("engine", "entry", "verifier", "verifier.engine")]
    assert not offenders, f"modules that reach a verification engine around verifier.entry: {offenders}"
    assert defines_verify_candidate == ["verifier/entry.py"]
    assert not probes, probes


def test_the_grep_test_sees_a_module_that_goes_around_the_entry():
    """The check above can fail: a module importing the local engine is found."""
    tree = ast.parse("from verifier.engine import verify_batch\nverify_batch([])\n")
    assert _names(tree) & ENGINE_NAMES == {"verify_batch"}
    assert not _names(ast.parse('"""calls verify_batch in prose only"""\n')) & ENGINE_NAMES


# ---------------------------------------------------------------------------- every path through the entry


def _fenced(code: str) -> str:
    return f"Here is my kernel.\n```python\n{code}```\n"


HONEST_NAMED = fx.HONEST_RELU.replace("return ext.relu(x.contiguous())",
                                      "flat = x.contiguous()\n        return ext.relu(flat)")
# (task name, response) in the order a policy answered; the second answer is the first one again (a copy)
ANSWERS = [("relu", _fenced(fx.HONEST_RELU)), ("relu", _fenced(fx.HONEST_RELU)), ("relu", _fenced(HONEST_NAMED)),
           ("relu", _fenced(fx.cpu_candidate("return torch.relu(x)"))), ("matmul", _fenced(fx.HONEST_MATMUL))]


class EngineLog:
    """Wraps the entry's engines (they still run): which candidate ids reached each, call by call."""

    def __init__(self, monkeypatch):
        self.calls: list[tuple[str, list[str]]] = []
        for name in ("_run_local", "_run_ray"):
            real = getattr(entry, name)

            def wrapped(unique, *a, _real=real, _name=name, **kw):
                self.calls.append((_name, [c.candidate_id for _, c in unique]))
                return _real(unique, *a, **kw)

            monkeypatch.setattr(entry, name, wrapped)


def _row(v) -> dict:
    return {k: x for k, x in to_row(v).items() if k not in MEASURED}


@pytest.fixture(scope="module")
def both_paths(tmp_path_factory):
    """The same answers verified by the verify stage (a run directory whose candidates the generate stage's
    make_candidate made) and by the RL reward a loop round builds (train_rl's verifier_reward_fn with the
    round's [verify] and Ray settings), with the engines counted."""
    mp = pytest.MonkeyPatch()
    log = EngineLog(mp)
    try:
        settings = load_settings(overrides=FAST_VERIFY)
        tasks = {"relu": Task.from_code(fx.RELU_TASK, name="relu", source="seed", level=1),
                 "matmul": Task.from_code(fx.MATMUL_TASK, name="matmul", source="seed", level=1)}
        run_dir = tmp_path_factory.mktemp("one-entry")
        seen: dict = {}
        cands = []
        for name, resp in ANSWERS:
            t = tasks[name]
            n = seen[name] = seen.get(name, -1) + 1
            cands.append(make_candidate(t.task_id, "cpu", Policy(), resp,
                                        dialogue_id=dialogue_id_for(t.task_id, "cpu", "policy", n)))
        store.write_records(run_dir, "tasks", list(tasks.values()))
        store.write_records(run_dir, "candidates", cands)
        counts = stages.verify(run_dir, settings)
        stage_calls = list(log.calls)
        # what loop._rl hands train_rl, and train_rl hands verifier_reward_fn
        reward = verifier_reward_fn("cpu", settings.verify,
                                    ray=entry.ray_target(settings.flows.ray_address, settings.flows.ray_workers))
        rows = {n: {"reference_code": t.reference_code, "task_id": t.task_id, "level": t.level}
                for n, t in tasks.items()}
        scores = reward([(rows[name], resp) for name, resp in ANSWERS])
        reward_calls = log.calls[len(stage_calls):]
        stored = {v.candidate_id: v for v in store.read_records(run_dir, "verdicts")}
        yield cands, counts, stored, scores, stage_calls, reward_calls
    finally:
        mp.undo()


def test_the_stage_and_the_rl_reward_give_identical_verdict_rows(both_paths):
    cands, counts, stored, scores, _, _ = both_paths
    assert counts["verified"] == counts["written"] == len(ANSWERS) and counts["reused"] == 1
    assert len(scores) == len(ANSWERS)
    # the reward makes the same candidates as the generate stage: same ids, and the same verdicts apart from
    # what the machine's speed and the random inputs decide (times, errors, reward through the speedup)
    for cand, score in zip(cands, scores):
        assert score.verdict.candidate_id == cand.candidate_id
        assert _row(score.verdict) == _row(stored[cand.candidate_id]), cand.candidate_id
        assert (score.correct, score.stage) == (bool(score.verdict.correct), score.verdict.stage_reached)
    assert [s.correct for s in scores] == [True, True, True, False, True], [s.verdict.status for s in scores]
    assert scores[3].verdict.status == "cheat"


def test_copies_are_reused_alike_by_both_paths(both_paths):
    """The repeated answer is verified once by each path; its copy gets that verdict under its own id."""
    cands, _, stored, scores, stage_calls, reward_calls = both_paths
    first, copy = cands[0].candidate_id, cands[1].candidate_id
    assert first != copy
    for calls in (stage_calls, reward_calls):
        assert [name for name, _ in calls] == ["_run_local"]  # one call, in this process (no flows.ray_address)
        ran = calls[0][1]
        assert copy not in ran and len(ran) == len(set(ran)) == len(ANSWERS) - 1
    assert stored[copy].stage_seconds == stored[first].stage_seconds  # the same judgement, not a second one
    assert scores[1].verdict.stage_seconds == scores[0].verdict.stage_seconds
    assert _row(scores[1].verdict) == {**_row(scores[0].verdict), "candidate_id": copy}


def test_kernelmill_verify_is_a_one_item_call_of_the_entry(tmp_path, monkeypatch, capsys):
    log = EngineLog(monkeypatch)
    task, cand, cfg = tmp_path / "relu.py", tmp_path / "answer.md", tmp_path / "fast.toml"
    task.write_text(fx.RELU_TASK)
    cand.write_text(_fenced(fx.HONEST_RELU))
    cfg.write_text("[verify]\n" + "".join(f"{k.split('.', 1)[1]} = {json.dumps(v)}\n"
                                          for k, v in FAST_VERIFY.items()))
    assert main(["--config", str(cfg), "verify", str(task), str(cand), "--backend", "cpu", "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["correct"] is True
    assert [(name, len(ids)) for name, ids in log.calls] == [("_run_local", 1)]
    assert log.calls[0][1] == [verdict["candidate_id"]]
