"""The stage list is the pipeline's wiring: settings sections, CLI subcommands, `run --stages`, the
Prefect flows and prefect.yaml all come from it and agree; settings are typed and checked; one
place builds a Candidate; the project's modules import each other without a circle.

Fast: nothing here compiles or verifies (the teacher writes candidates offline)."""

import ast
import json
import tomllib
from pathlib import Path

import pytest
import yaml

from flows_fixtures import ROOT
from kernelmill import store
from kernelmill.config import DEFAULT_CONFIG, load_settings
from kernelmill.errors import InputError
from kernelmill.schema import Task
from kernelmill.settings import Settings, section_type
from orchestrator import stages
from flows.cli import build_parser, main
from synth.generate.generators import TeacherGenerator, dialogue_id_for, make_candidate
from verifier.front.extract import extract_code
from bench.lib.fixtures import RELU_TASK

# The ground (kernelmill: schema, store, settings, errors, config), the packages the orchestrator drives,
# and the orchestrator with its Prefect wrapping (orchestrator/, flows/) on top.
PACKAGES = ("kernelmill", "synth", "graphs", "curation", "verifier", "train", "orchestrator", "flows")
BELOW = ("kernelmill", "synth", "graphs", "curation", "verifier", "train")
ABOVE = ("orchestrator", "flows")


# ---------------------------------------------------------------------------- settings


def test_default_toml_repeats_the_dataclass_defaults():
    """data/default.toml is for reading; every key in it is a setting with the same default. A key
    missing from it is allowed (adding a setting is one field in one dataclass), a stale one is not."""
    import dataclasses

    written = tomllib.loads(DEFAULT_CONFIG.read_text())
    # the dataclasses' own defaults (tests/conftest.py gives the VerifyConfigs tests build the run's pch_dir and build root)
    defaults = {s: {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                    for f in dataclasses.fields(section_type(s))} for s in Settings().to_dict()}
    assert set(written) == set(defaults)
    for section, keys in written.items():
        for key, value in keys.items():
            assert key in defaults[section], f"[{section}] {key} is in default.toml but is not a setting"
            assert value == defaults[section][key], f"[{section}] {key}: default.toml {value!r}, dataclass {defaults[section][key]!r}"


def test_unknown_or_misspelt_key_names_the_key_and_the_file(tmp_path):
    cfg = tmp_path / "mine.toml"
    cfg.write_text("[mine]\nworker = 3\n")
    with pytest.raises(InputError) as e:
        load_settings(cfg)
    assert str(cfg) in str(e.value) and "mine.worker" in str(e.value) and "did you mean workers" in str(e.value)

    cfg.write_text("[run]\nnnsmith_n = 0\n")  # a key of the old layout says where it went
    with pytest.raises(InputError, match="moved to nnsmith.n"):
        load_settings(cfg)
    with pytest.raises(InputError, match="KERNELMILL_MINE_WROKERS"):
        load_settings(env={"KERNELMILL_MINE_WROKERS": "2"})
    with pytest.raises(InputError, match="expected int"):
        load_settings(overrides={"mine.workers": "two"})
    with pytest.raises(InputError, match="verify.bogus"):
        load_settings(overrides={"verify.bogus": 1})


def test_layers_apply_in_order_and_reach_the_typed_sections(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[mine]\nworkers = 3\n[verify]\ntiming_trials = 7\n")
    s = load_settings(cfg, overrides={"mine.workers": 5}, env={"KERNELMILL_NNSMITH_N": "0", "KERNELMILL_HOME": "/x"})
    assert (s.mine.workers, s.verify.timing_trials, s.nnsmith.n) == (5, 7, 0)
    assert type(s.verify) is section_type("verify") and s.mine.timeout_s == 10.0


def test_set_mine_workers_reaches_the_miner_through_kernelmill_run(tmp_path, monkeypatch, capsys):
    """A spy that calls the real miner records what it was given (mining an empty directory)."""
    seen = []
    real = stages.mine_tasks

    def spy(source, **kw):
        seen.append(kw)
        return real(source, **kw)

    monkeypatch.setattr(stages, "mine_tasks", spy)
    src = tmp_path / "empty_repo"
    src.mkdir()
    assert main(["run", "--no-prefect", "--no-progress", "--stages", "mine", "--out", str(tmp_path / "run"),
                 "--set", f"mine.source={src}", "--set", "mine.workers=2", "--set", "mine.max_forward_s=1.5"]) == 0
    assert seen and seen[0]["workers"] == 2 and seen[0]["max_forward_s"] == 1.5
    # every [mine] key but source reaches mine_tasks by name (and the stage's progress callback)
    assert set(seen[0]) - {"progress"} == set(Settings().to_dict()["mine"]) - {"source"}
    assert json.loads((tmp_path / "run" / "mine_report.json").read_text())["tasks_emitted"] == 0
    assert main(["run", "--no-prefect", "--stages", "mine", "--set", "mine.wrokers=2", "--out", str(tmp_path)]) == 2
    assert "mine.wrokers" in capsys.readouterr().err


# ---------------------------------------------------------------------------- one list, every front end


def test_cli_flows_and_prefect_yaml_come_from_the_stage_list():
    from flows import stages as flow_stages
    from flows.commands import ENTRYPOINTS

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for s in stages.STAGES:
        assert s.cli_name in sub.choices, s.name
        assert isinstance(getattr(Settings(), s.section), section_type(s.section))
        flow = getattr(flow_stages, f"{s.name}_flow")
        assert flow.name == f"kernelmill-{s.name}" and ENTRYPOINTS[s.name] == f"flows/stages.py:{s.name}_flow"
    deployments = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    assert {d["name"]: d["entrypoint"] for d in deployments} == ENTRYPOINTS
    for d in deployments:  # every parameter a deployment sets is one its flow takes
        module, _, fn = d["entrypoint"].partition(":")
        flow = getattr(flow_stages if module == "flows/stages.py" else __import__("flows.pipeline").pipeline, fn)
        assert set(d.get("parameters") or {}) <= set(flow.parameters.properties), d["name"]


def test_run_stages_rejects_unknown_names(capsys):
    assert main(["run", "--stages", "verify,bogus", "--no-prefect"]) == 2
    assert "bogus" in capsys.readouterr().err


def test_ray_flag_needs_a_stage_that_can_use_ray(capsys):
    assert main(["run", "--ray", "local", "--no-prefect"]) == 2
    assert "--ray local" in capsys.readouterr().err


# ---------------------------------------------------------------------------- one candidate rule


def test_generate_gives_the_same_ids_from_every_front_end(tmp_path, capsys):
    """`kernelmill generate` and `kernelmill run --stages generate` run one code path; its
    candidates are make_candidate's, with the verifier's extractor and the dialogue id rule."""
    task = Task.from_code(RELU_TASK, name="relu", source="seed", level=1)
    for d in ("a", "b"):
        store.write_records(tmp_path / d, "tasks", [task])
    sets = ["--set", "generate.samples_per_task=2", "--set", "generate.bug_rate=0.5", "--backend", "cpu"]
    assert main(["generate", str(tmp_path / "a"), *sets]) == 0
    assert main(["run", "--no-prefect", "--no-progress", "--stages", "generate", "--out", str(tmp_path / "b"), *sets]) == 0
    a, b = (sorted(store.read_records(tmp_path / d, "candidates"), key=lambda c: c.candidate_id) for d in ("a", "b"))
    assert len(a) == 2 and [c.candidate_id for c in a] == [c.candidate_id for c in b]

    gen = TeacherGenerator("cpu", bug_rate=0.5)
    for c in a:
        sample = next(i for i in range(2) if c.dialogue_id == dialogue_id_for(task.task_id, "cpu", "teacher", i))
        again = make_candidate(task.task_id, "cpu", gen, c.response, dialogue_id=c.dialogue_id, prompt=c.prompt)
        assert again.candidate_id == c.candidate_id and c.code == extract_code(c.response)
        assert c.turn == 0 and sample in (0, 1)
    assert sum(bool(c.injected_bug) for c in a) == 1  # bug_rate 0.5 of 2 samples, recorded on the row


# ---------------------------------------------------------------------------- imports


def _imports(path: Path, module: str) -> set[str]:
    """Project modules a file imports anywhere (module level or inside functions)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        out |= {n for n in names if n.split(".")[0] in PACKAGES}
    return out


def _project_modules() -> dict[str, set[str]]:
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts): p for pkg in PACKAGES
             for p in (ROOT / pkg).rglob("*.py") if p.name != "__init__.py"}
    return {m: {i for i in _imports(p, m) if i in files and i != m} for m, p in files.items()}


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_between_the_projects_modules():
    """Imports inside functions count too: a circle hidden in a function is still a circle."""
    circles = _cycles(_project_modules())
    assert not circles, circles


def test_the_orchestrator_stands_above_the_packages_it_drives():
    """No module of the ground (kernelmill/) or of a driven package (verifier/ with its one entry and its Ray
    engine, train/ with the RL reward, synth/, curation/, graphs/) imports orchestrator/ or flows/, anywhere
    in the file (inside functions too)."""
    graph = _project_modules()
    assert {m for m in graph if m.startswith(("orchestrator.", "flows."))} >= {"orchestrator.stages",
                                                                               "orchestrator.pipeline", "flows.cli"}
    assert {"verifier.entry", "verifier.ray_pool", "train.rollout"} <= set(graph)
    offenders = {m: sorted(i for i in imported if i.split(".")[0] in ABOVE)
                 for m, imported in graph.items() if m.split(".")[0] in BELOW}
    assert not {m: i for m, i in offenders.items() if i}, offenders


def test_the_verification_entry_needs_only_the_verifier_and_the_ground():
    """verifier.entry and its Ray engine reach (through every project import, inside functions too) only
    verifier/ and kernelmill/: the RL reward and a bare GPU box call them without the orchestrator, and the
    dispatch to Ray is the verifier's, not the orchestrator's."""
    graph = _project_modules()
    for start in ("verifier.entry", "verifier.ray_pool"):
        seen, todo = set(), [start]
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo += graph.get(m, ())
        assert {m.split(".")[0] for m in seen} <= {"verifier", "kernelmill"}, (start, sorted(seen))


def test_the_ground_holds_no_orchestration():
    """kernelmill/ is the ground: schema, store, settings, errors, config; the stage list, pipeline and
    CLI live in orchestrator/, the Ray executor behind the verifier's one entry (verifier/ray_pool.py)."""
    assert not [p.name for p in (ROOT / "kernelmill").glob("*.py")
                if p.stem in ("stages", "pipeline", "cli", "ray_verify")]


# ---------------------------------------------------------------------------- defaults in one place


def test_keyword_defaults_of_the_stage_functions_equal_the_settings():
    """Library functions keep keyword defaults for direct callers (tests, benchmarks); every one
    that names a setting must equal the dataclass default, so the two cannot drift apart (mining,
    nnsmith, annotation and the OpenAI client read them from the dataclasses; train/ repeats them)."""
    import dataclasses
    import inspect

    from graphs.nnsmith_tasks import generate_nnsmith_tasks
    from synth.annotate.annotator import annotate_stream, annotate_tasks
    from synth.annotate.store import annotate_into
    from synth.generate.generators import OpenAIGenerator
    from synth.mine.miner import mine_tasks
    from train.evaluate import evaluate_checkpoint
    from train.rl import train_rl
    from train.sft import train_sft

    s = Settings()
    checks = [  # (function, settings section, {keyword: setting, or None where the meaning differs})
        (mine_tasks, s.mine, {}),
        (generate_nnsmith_tasks, s.nnsmith, {"dtypes": None}),  # None: graphs/nnsmith_tasks.py's own list
        (annotate_tasks, s.annotate, {}),
        (annotate_stream, s.annotate, {}),
        (annotate_into, s.annotate, {"flush_every": "chunk"}),
        (OpenAIGenerator.__init__, s.generate, {"cache_dir": None}),  # the client caches only when given a directory
        (train_sft, s.train, {"steps": "sft_steps"}),
        (train_rl, s.train, {"steps": "rl_steps", "lr": "rl_lr", "save_every": "rl_save_every"}),
        (evaluate_checkpoint, s.train, {"n": "eval_n", "ks": None, "max_tasks": "eval_max_tasks"}),  # ks None: eval_k
    ]
    compared = 0
    for fn, section, names in checks:
        fields = dataclasses.asdict(section)
        for name, p in inspect.signature(fn).parameters.items():
            key = names.get(name, name)
            if key is not None and key in fields and p.default is not inspect.Parameter.empty:
                default = list(p.default) if isinstance(p.default, tuple) else p.default
                if default is None and not fields[key]:
                    default = fields[key]  # None (not given) stands for an empty setting: 0, "", []
                assert default == fields[key], f"{fn.__qualname__}({name}={p.default!r}) but {key} = {fields[key]!r}"
                compared += 1
    assert compared > 50


def test_kernelmill_load_labels_tasks_kernelbench_unless_told_otherwise():
    """`kernelmill load DIR` loads a KernelBench directory: its tasks are source=kernelbench, not the
    default run's "seed" (the [load] section's default, which labels data/seed_tasks)."""
    from flows.cli import stage_overrides

    load = next(s for s in stages.STAGES if s.name == "load")
    parser = build_parser()
    assert stage_overrides(load, parser.parse_args(["load", "kb", "--out", "r"]))["load.source"] == "kernelbench"
    assert stage_overrides(load, parser.parse_args(["load", "kb", "--out", "r", "--source", "mine"]))["load.source"] == "mine"
    given = stage_overrides(load, parser.parse_args(["load", "kb", "--out", "r", "--set", "load.source=x"]))
    assert given["load.source"] == "x"
    assert Settings().load.source == "seed"  # kernelmill run's default load is still the seed tasks


def test_verifier_job_defaults_are_the_verify_settings():
    """verifier/common/contract.py's Job takes its defaults from VerifyConfig (no second copy to drift)."""
    import dataclasses

    from verifier.common.config import VerifyConfig
    from verifier.common.contract import Job

    cfg = {f.name: f.default for f in dataclasses.fields(VerifyConfig)}
    # other_shape means a mode string in a Job (the config's bool says whether there is one)
    shared = [f for f in dataclasses.fields(Job)
              if f.name in cfg and f.name != "other_shape" and f.default is not dataclasses.MISSING]
    assert len(shared) >= 8
    assert all(f.default == cfg[f.name] for f in shared), [(f.name, f.default, cfg[f.name]) for f in shared]
