"""Resume in one place (orchestrator/ledger.py): a run directory's ledger.json records each finished step;
the runner skips what it records (gatherers with equal settings, the loop's sub-run steps), leaves out
the annotate stage's recorded failures, refuses a damaged ledger by name, reads an earlier version's
record files (raw/gathered.txt, annotate_failures.json, round-<r>/phases.json, metrics.jsonl), and no
module but the runner writes resume records."""

import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest

from kernelmill import store
from kernelmill.config import load_settings
from kernelmill.errors import InputError
from kernelmill.schema import Task
from orchestrator import ledger, stages
from orchestrator.ledger import UNFINISHED, Step, run_steps
from orchestrator.loop import run_loop
from orchestrator.pipeline import prepare_run, run_stages

ROOT = Path(__file__).resolve().parents[1]

REF = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
       "        return torch.relu(x) * {k}\n\n\ndef get_inputs():\n    return [torch.randn(8, 8)]\n\n\n"
       "def get_init_inputs():\n    return []\n")


def tasks(n: int) -> list[Task]:
    return [Task.from_code(REF.format(k=k + 1), name=f"relu{k}", source="seed", level=1) for k in range(n)]


# ---------------------------------------------------------------------------- a run interrupted after a step


def test_a_sub_run_interrupted_after_a_step_resumes_without_redoing_it(tmp_path):
    calls: list[str] = []

    def write(d, s, p):
        calls.append("write")
        return {"written": store.write_records(d, "tasks", tasks(2))}

    def count(d, s, p):
        calls.append("count")
        if calls.count("count") == 1:
            raise KeyboardInterrupt  # Ctrl-C inside the second step
        return {"tasks": len(store.read_records(d, "tasks"))}

    steps = [Step("write", write), Step("count", count)]
    with pytest.raises(KeyboardInterrupt):
        run_steps(tmp_path, steps, None)
    assert set(ledger.entries(tmp_path)) == {"write"}  # the interrupted step is not recorded
    res = run_steps(tmp_path, steps, None)
    assert calls == ["write", "count", "count"]  # write ran once
    assert res.entries["write"].counts == {"written": 2} and res.entries["count"].counts == {"tasks": 2}
    again = run_steps(tmp_path, steps, None, stop=lambda: pytest.fail("asked with nothing pending"))
    assert calls == ["write", "count", "count"] and not again.stopped and set(again.entries) == {"write", "count"}


def test_an_unfinished_step_is_not_recorded_and_the_context_starts_only_for_pending_steps(tmp_path):
    entered: list[str] = []

    class Server:
        def __enter__(self):
            entered.append("up")
            return "served"

        def __exit__(self, *exc):
            entered.append("down")

    seen: list = []
    budget = {"left": 1}

    def sample(d, s, p):
        seen.append(s)
        return {"sampled": 1}

    def train(d, s, p):
        seen.append(s)
        budget["left"] -= 1
        return {"steps_done": 1, **({UNFINISHED: "out of time"} if budget["left"] < 0 else {})}

    steps = [Step("sample", sample, context=True), Step("train", train)]
    budget["left"] = 0
    res = run_steps(tmp_path, steps, "plain", context=Server)
    assert res.stopped == "out of time" and res.unfinished == {"steps_done": 1} and set(res.entries) == {"sample"}
    assert seen == ["served", "plain"] and entered == ["up", "down"]  # the server is down before training
    budget["left"] = 5
    res = run_steps(tmp_path, steps, "plain", context=Server)
    assert not res.stopped and set(res.entries) == {"sample", "train"}
    assert entered == ["up", "down"]  # sample was recorded: no server for this call
    assert run_steps(tmp_path / "other", steps, "plain", stop=lambda: "spent").stopped == "spent"
    assert not (tmp_path / "other" / ledger.LEDGER).exists()


def test_a_step_whose_model_is_gone_runs_again(tmp_path):
    ckpt = tmp_path / "ckpt-1"
    calls = []

    def train(d, s, p):  # a trainer leaves a checkpoint
        calls.append(1)
        ckpt.mkdir(exist_ok=True)
        return {"model": str(ckpt)}

    step = Step("rft", train)
    assert run_steps(tmp_path, [step], None).entries["rft"].model == str(ckpt)
    run_steps(tmp_path, [step], None)
    assert calls == [1]
    ckpt.rmdir()  # not carried to the next machine
    assert ledger.done(tmp_path, "rft") is None
    run_steps(tmp_path, [step], None)
    assert calls == [1, 1] and ledger.done(tmp_path, "rft") is not None


def mine_settings(src: Path, **more):
    return load_settings(None, {"mine.source": str(src), "mine.workers": 1, **more})


def test_a_gatherer_recorded_with_equal_settings_is_not_run_again(tmp_path, monkeypatch):
    """`kernelmill run --stages mine` twice on one directory: the second call does not mine (the runner's
    ledger records the mine stage with its settings); other settings mine again."""
    src = tmp_path / "src"
    src.mkdir()
    calls = []
    real = stages.mine_tasks
    monkeypatch.setattr(stages, "mine_tasks", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    run = tmp_path / "run"
    first = run_stages(run, mine_settings(src), ["mine"])["mine"]
    assert calls == [1] and "gathered_before" not in first
    again = run_stages(run, mine_settings(src), ["mine"])["mine"]
    assert calls == [1] and again == {"tasks": first["tasks"], "written": 0, "gathered_before": True}
    (entry,) = [e for e in ledger.entries(run).values() if e.step.startswith("mine ")]
    assert json.loads(entry.note)["source"] == str(src) and entry.counts["tasks"] == first["tasks"]
    run_stages(run, mine_settings(src, **{"mine.max_files": 3}), ["mine"])
    assert calls == [1, 1]


# ---------------------------------------------------------------------------- a damaged ledger


def test_a_damaged_ledger_is_an_input_error_naming_the_file(tmp_path, capsys):
    from flows.cli import main

    run = tmp_path / "run"
    store.write_records(run, "tasks", tasks(1))
    (run / ledger.LEDGER).write_text('{"entries": [{"step": "load"')  # cut short
    with pytest.raises(InputError, match=re.escape(str(run / ledger.LEDGER))):
        prepare_run(run)
    (run / ledger.LEDGER).write_text('{"entries": [{"step": "load", "when": 3}]}')  # JSON, not a ledger
    with pytest.raises(InputError, match="not a kernelmill ledger"):
        ledger.done(run, "load")
    assert main(["run", "--no-prefect", "--no-progress", "--stages", "curate", "--out", str(run)]) == 2
    assert str(run / ledger.LEDGER) in capsys.readouterr().err
    assert not (run / "sft").exists()  # refused before any stage ran


# ---------------------------------------------------------------------------- an earlier version's layout


def test_an_old_run_directory_with_gathered_txt_resumes_without_gathering(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    s = mine_settings(src)
    run = tmp_path / "run"
    (run / "raw").mkdir(parents=True)
    key = "mine:" + json.dumps(dataclasses.asdict(s.mine), sort_keys=True, default=str)
    (run / "raw" / "gathered.txt").write_text(f"7\t{key}\n")  # what earlier versions wrote after mining
    monkeypatch.setattr(stages, "mine_tasks", lambda *a, **kw: pytest.fail("mined again"))
    assert run_stages(run, s, ["mine"])["mine"] == {"tasks": 7, "written": 0, "gathered_before": True}
    run_stages(run, s, ["load"])  # a mark: the old record is now in ledger.json
    (run / "raw" / "gathered.txt").unlink()
    assert run_stages(run, s, ["mine"])["mine"]["gathered_before"] is True


def test_recorded_annotation_failures_are_left_out_unless_retried(tmp_path):
    """A task an earlier version recorded in annotate_failures.json is not annotated again (the ledger
    takes the record over); annotate.retry_failed annotates it, and the ledger drops it."""
    run = tmp_path / "run"
    (t,) = tasks(1)
    store.write_records(run / "raw", "tasks", [t])
    (run / "annotate_failures.json").write_text(json.dumps({"failures": [
        {"task_id": t.task_id, "name": t.name, "path": "relu0.py", "level": 1, "category": "timeout",
         "reason": "timeout: 1 s", "seconds": 1.0}]}))
    s = load_settings(None, {"annotate.workers": 1})
    a = run_stages(run, s, ["annotate"])["annotate"]
    assert a["annotated"] == 0 and a["failed_before"] == 1 and a["failures"] == ["relu0.py [timeout]: timeout: 1 s"]
    assert ledger.SKIP not in a and ledger.done(run, "annotate").skip == (t.task_id,)
    assert not (run / "tasks").exists()
    retried = run_stages(run, load_settings(None, {"annotate.workers": 1, "annotate.retry_failed": True}),
                         ["annotate"])["annotate"]
    assert retried["annotated"] == 1 and retried["failed_before"] == 0
    assert ledger.done(run, "annotate").skip == ()
    assert [x.task_id for x in store.read_records(run, "tasks")] == [t.task_id]


def loop_settings(**more):
    return load_settings(None, {"loop.model": "", "generate.base_url": "http://127.0.0.1:9/v1",  # never asked
                                "loop.k": 1, "loop.train": "rft", "train.heldout_frac": 0.5, **more})


def stand_in_phases(calls: list, fail_at: str = ""):
    """Stand-ins for the stage functions (nothing can be sampled here: no model); the loop, its runner and
    the ledger are real. ``fail_at``: "<dir name>/<step>" raises KeyboardInterrupt once."""
    def phase(name):
        def run(d, s, p):
            calls.append(f"{d.name}/{name}")
            if f"{d.name}/{name}" == fail_at and calls.count(fail_at) == 1:
                raise KeyboardInterrupt
            return {"rows": 0} if name == "curate" else {"ran": name}
        return run
    return {n: phase(n) for n in ("generate", "verify", "repair", "curate")}


def test_a_loop_interrupted_inside_a_round_resumes_at_the_step_it_was_in(tmp_path):
    run = tmp_path / "run"
    store.write_records(run, "tasks", tasks(8))
    calls: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        run_loop(run, loop_settings(), None, stand_in_phases(calls, fail_at="pool/verify"))
    assert calls == ["eval-0/generate", "eval-0/verify", "pool/generate", "pool/verify"]
    calls.clear()
    out = run_loop(run, loop_settings(), None, stand_in_phases(calls))
    assert calls == ["pool/verify", "pool/repair", "pool/curate", "eval-1/generate", "eval-1/verify"]
    assert out["rounds"][0]["generate"] == {"ran": "generate"}  # the recorded counts of the earlier call
    assert out["rounds"][0]["rft"] == {"skipped": "no correct answer in the pool"}
    assert [r["model_index"] for r in out["metrics"]] == [0, 1] and "stopped" not in out
    loop = run / "loop"
    assert set(ledger.entries(loop / "round-1" / "pool")) == {"generate", "verify", "repair", "curate"}
    assert set(ledger.entries(loop / "eval-1")) == {"generate", "verify", "score"}
    calls.clear()
    assert run_loop(run, loop_settings(), None, stand_in_phases(calls))["metrics"] == out["metrics"]
    assert calls == [] and len((loop / "metrics.jsonl").read_text().splitlines()) == 2


def test_an_old_loop_directory_with_phases_json_resumes_without_running_a_phase(tmp_path):
    """round-<r>/phases.json and metrics.jsonl of an earlier version: nothing is sampled, trained or
    evaluated again, and the round reports what phases.json recorded."""
    run = tmp_path / "run"
    store.write_records(run, "tasks", tasks(8))
    calls: list[str] = []
    run_loop(run, loop_settings(), None, stand_in_phases(calls))  # the layout's files, then made old:
    loop = run / "loop"
    for d in (loop / "eval-0", loop / "eval-1", loop / "round-1" / "pool", loop / "round-1" / "rft"):
        (d / ledger.LEDGER).unlink()
    pool = {"generate": {"candidates_written": 4}, "verify": {"verified": 4}, "repair": {}, "curate": {"rows": 0}}
    (loop / "round-1" / "phases.json").write_text(json.dumps({"pool": pool, "rft": {"skipped": "old"}}))
    calls.clear()
    out = run_loop(run, loop_settings(), None, stand_in_phases(calls))
    assert calls == [] and "stopped" not in out
    assert out["rounds"][0] == {"round": 1, **pool, "rft": {"skipped": "old"}}
    assert [r["model_index"] for r in out["metrics"]] == [0, 1]


# ---------------------------------------------------------------------------- one writer

RECORD_FILES = ("gathered.txt", "phases.json", "annotate_failures.json", "ledger.json")


def resume_writes(path: Path) -> list[str]:
    """``name:line`` of every place in one Python file that names a resume record file in code (docstrings and
    comments aside) or marks the ledger (``ledger.mark(...)``, or ``mark`` imported from orchestrator.ledger)."""
    tree = ast.parse(path.read_text(errors="replace"))
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            out += [f"{name}:{n.lineno}" for name in RECORD_FILES if name in n.value]
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "mark" \
                and isinstance(n.func.value, ast.Name) and n.func.value.id == "ledger":
            out.append(f"ledger.mark:{n.lineno}")
        elif isinstance(n, ast.ImportFrom) and n.module == "orchestrator.ledger" and "mark" in {a.name for a in n.names}:
            out.append(f"import mark:{n.lineno}")
    return out


def test_the_scan_finds_record_names_in_code_and_ledger_marks(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('"""Reads phases.json (a docstring: not counted)."""\nfrom orchestrator import ledger\n'
                 'from orchestrator.ledger import entries, mark\n'
                 'def g(d):\n    """gathered.txt"""\n    ledger.mark(d, "x", {})  # phases.json\n'
                 '    return d / "raw" / "gathered.txt", ledger.entries(d)\n')
    assert resume_writes(f) == ["import mark:3", "ledger.mark:6", "gathered.txt:7"]


def test_no_module_but_the_runner_writes_resume_records():
    """Only orchestrator/ledger.py names the record files in code and marks steps (it reads an earlier
    version's files as its entries); synth/annotate/store.py writes the annotate report, which decides
    nothing. Scans the product's packages."""
    files = sorted(p for d in ("orchestrator", "synth", "curation", "train", "flows", "graphs", "kernelmill",
                               "verifier") for p in (ROOT / d).rglob("*.py") if "__pycache__" not in p.parts)
    assert len(files) > 50 and ROOT / "orchestrator" / "ledger.py" in files
    allowed = {"orchestrator/ledger.py", "synth/annotate/store.py"}
    found = {p.relative_to(ROOT).as_posix(): resume_writes(p) for p in files}
    assert any(found["orchestrator/ledger.py"])  # the scan sees the writer
    assert [h for h in found["synth/annotate/store.py"] if not h.startswith("annotate_failures.json")] == []
    offenders = {f: hits for f, hits in found.items() if hits and f not in allowed}
    assert not offenders, f"resume records outside the runner (orchestrator/ledger.py): {offenders}"
