"""The miner's parts: sources (directory, git, Hugging Face dataset), tree-sitter extraction,
input deduction from real torch error messages, and the sandbox's timeout and memory limits."""

import subprocess
import textwrap

import pytest
import torch
import torch.nn as nn

from kernelmill.errors import InputError
from synth.mine.discover import FileSyntaxError, NotSelfContained, RepoIndex, find_module_classes, parse_file
from synth.mine.extract import extract_module
from synth.mine.input_sandbox import SandboxPool
from synth.mine.input_synthesis import InputGuess, adjust_inputs
from synth.mine.miner import mine_tasks
from synth.mine.sources import (SkippedFile, SourceFile, decode_source_file, iter_repos, license_from_text,
                                parse_hf_source, source_kind)

ALLOW = ["mit", "apache-2.0", "unknown"]

SWISH = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class Swish(nn.Module):
        def __init__(self, beta: float = 1.0):
            super().__init__()
            self.beta = beta

        def forward(self, x):
            return x * torch.sigmoid(self.beta * x)
''')


# ---------------------------------------------------------------------------- extraction


def _index(files: dict[str, str]):
    parsed = [parse_file(p, textwrap.dedent(t)) for p, t in files.items()]
    return RepoIndex(parsed), {p.path: p for p in parsed}


def test_closure_pulls_helpers_constants_bases_and_relative_imports():
    idx, pf = _index({
        "pkg/__init__.py": "",
        "pkg/common.py": '''
            import math
            import torch.nn as nn
            SCALE = math.sqrt(2.0)
            UNUSED = open  # not needed by anything mined

            def scaled(x):
                return x * SCALE

            class Base(nn.Module):
                def forward(self, x):
                    return scaled(self.inner(x))
        ''',
        "pkg/model.py": '''
            import os
            import torch
            from torch import nn
            from .common import Base as B

            class Net(B):
                def __init__(self, dim):
                    super(Net, self).__init__()
                    self.inner = nn.Linear(dim, dim)

            def unrelated():
                return os.getcwd()
        ''',
    })
    found = find_module_classes(idx, pf["pkg/model.py"])
    assert [(m.class_name, m.has_forward) for m in found] == [("Net", True)]
    em = extract_module(idx, pf["pkg/model.py"], "Net")
    code = em.program
    assert "class Model(B):" in code and "super(Model, self)" in code
    assert "def scaled" in code and "SCALE = math.sqrt(2.0)" in code and "class Base" in code
    assert "B = Base" in code and code.index("B = Base") < code.index("class Model")
    assert "import os" not in code and "UNUSED" not in code and "def unrelated" not in code
    assert "def forward(self, *args, **kwargs)" in code  # Net inherits forward: Model gets one in its body
    assert em.files_used == ["pkg/common.py", "pkg/model.py"]
    compile(code, "<mined>", "exec")


def test_local_names_are_not_mistaken_for_globals():
    idx, pf = _index({"m.py": '''
        import torch.nn as nn
        x = 3  # a module-level x that the class must not drag in

        class Net(nn.Module):
            default_scale = 2.0
            scales = (default_scale, default_scale * 2)  # reads a class attribute, not a global

            def forward(self, x, *rest, scale=2, **kw):
                y = [x for x in rest]
                for i, (a, b) in enumerate(zip(y, y)):
                    pass
                with open("f") as fh:
                    pass
                f = lambda t: t * scale
                return f(x)
    '''})
    code = extract_module(idx, pf["m.py"], "Net").program
    assert "x = 3" not in code


def test_what_cannot_be_self_contained_is_reported_with_a_reason():
    idx, pf = _index({"m.py": '''
        import torch.nn as nn
        import not_a_real_package_xyz as npx
        from .missing_sibling import Thing

        class NeedsPackage(nn.Module):
            def forward(self, x):
                return npx.op(x)

        class NeedsSibling(nn.Module):
            def forward(self, x):
                return Thing(x)

        class NeedsUndefined(nn.Module):
            def forward(self, x):
                return helper_nobody_wrote(x)

        class Model(nn.Module):
            def forward(self, x):
                return x

        class UsesModel(nn.Module):
            def forward(self, x):
                return Model()(x)

        class Container(nn.Module):
            pass
    '''})
    reasons = {}
    for m in find_module_classes(idx, pf["m.py"]):
        if not m.has_forward:
            reasons[m.class_name] = "no_forward"
            continue
        try:
            extract_module(idx, pf["m.py"], m.class_name)
            reasons[m.class_name] = "ok"
        except NotSelfContained as e:
            reasons[m.class_name] = e.reason
    assert reasons == {"NeedsPackage": "missing_package", "NeedsSibling": "missing_local_module",
                       "NeedsUndefined": "undefined_name", "Model": "ok", "UsesModel": "name_conflict",
                       "Container": "no_forward"}


def test_syntax_errors_and_bad_bytes_are_skipped():
    with pytest.raises(FileSyntaxError):
        parse_file("bad.py", "class A(nn.Module):\n    def forward(self, x)\n        return x +\n")
    for data, reason in ((b"\x00\x01binary", "binary"), ("caf\xe9".encode("latin-1"), "non_utf8"),
                         (b"x = 1\n" * 100, "too_large")):
        with pytest.raises(SkippedFile) as e:
            decode_source_file(SourceFile("r", "f.py", data=data, size=len(data)), max_file_bytes=200)
        assert e.value.reason == reason


def test_license_detection():
    assert license_from_text("MIT License\n\nPermission is hereby granted, free of charge, to any") == "mit"
    assert license_from_text("Apache License\nVersion 2.0, January 2004") == "apache-2.0"
    assert license_from_text("GNU GENERAL PUBLIC LICENSE\nVersion 3, 29 June 2007") == "gpl-3.0"
    assert license_from_text("Redistribution and use in source and binary forms ... Neither the name") == "bsd-3-clause"
    assert license_from_text("All rights reserved.") == "other"


# ---------------------------------------------------------------------------- input deduction


def _error_of(fn) -> str:
    with pytest.raises(Exception) as e:
        fn()
    return str(e.value)


def test_error_messages_steer_the_input_shapes():
    lin = nn.Linear(48, 8)
    g = [InputGuess("float", [2, 16, 32])]
    assert adjust_inputs(g, _error_of(lambda: lin(torch.randn(2, 16, 32))), lin)
    assert g[0].shape == [2, 16, 48]
    lin(torch.randn(*g[0].shape))

    conv = nn.Conv2d(3, 8, 3)
    g = [InputGuess("float", [2, 16, 32])]
    # read as an unbatched [C, H, W] image with 2 channels: the message names the 4-D shape and 3 channels
    assert adjust_inputs(g, _error_of(lambda: conv(torch.randn(2, 16, 32))), conv)
    assert g[0].shape == [2, 3, 16, 32]
    conv(torch.randn(*g[0].shape))
    bn = nn.BatchNorm1d(12)
    g = [InputGuess("float", [2, 5, 7, 7])]
    assert adjust_inputs(g, _error_of(lambda: bn(torch.randn(2, 5, 7, 7))), bn)  # 2D or 3D input wanted
    assert adjust_inputs(g, _error_of(lambda: bn(torch.randn(*g[0].shape))), bn)  # 12 features
    bn(torch.randn(*g[0].shape))

    emb = nn.Embedding(50, 4)
    g = [InputGuess("float", [2, 16, 4])]
    assert adjust_inputs(g, _error_of(lambda: emb(torch.randn(2, 16, 4))), emb)
    assert g[0].kind == "int" and g[0].hi == 50
    assert not adjust_inputs(g, "some error that says nothing about shapes", emb)


# ---------------------------------------------------------------------------- sandbox


def test_sandbox_kills_hangs_and_limits_memory_and_keeps_going():
    hang = "import time\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n" \
           "        super().__init__()\n        while True:\n            time.sleep(0.01)\n"
    huge = "import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n" \
           "        super().__init__()\n        self.register_buffer('b', torch.ones(1 << 34))\n"
    job = {"mode": "deduce", "target_numel": 1024, "budget_s": 2, "max_forward_s": 1.0}
    with SandboxPool(workers=1, memory_bytes=1 << 30) as pool:
        assert pool.run({**job, "program": hang, "timeout_s": 1.5})["reason"] == "timeout"
        assert pool.run({**job, "program": huge, "timeout_s": 20})["reason"] == "memory"
        # `import this` prints the Zen of Python to the zygote's stdout, its result pipe: kept off it
        ok = pool.run({**job, "program": SWISH.replace("class Swish", "class Model"), "timeout_s": 20,
                       "preload": ["this", "no_such_package_here"]})
    assert ok["status"] == "ok" and ok["init_args"] == [] and ok["outputs"][0]["shape"] == ok["inputs"][0]["shape"]


# ---------------------------------------------------------------------------- sources


def _git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


def test_git_repo_path_and_file_url_record_the_commit(tmp_path):
    repo = tmp_path / "acts"
    (repo / "acts").mkdir(parents=True)
    (repo / "acts" / "swish.py").write_text(SWISH)
    (repo / "LICENSE").write_text("MIT License\nPermission is hereby granted, free of charge, to any person")
    (repo / "untracked.py").write_text(SWISH.replace("Swish", "Untracked"))
    _git(repo, "init", "-q")
    _git(repo, "add", "acts/swish.py", "LICENSE")
    _git(repo, "commit", "-q", "-m", "init")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert source_kind(str(repo)) == "git"
    groups = list(iter_repos(str(repo)))
    assert [f.path for g in groups for f in g.files] == ["acts/swish.py"]  # tracked files only
    assert groups[0].commit == head and groups[0].license == "mit"

    res = mine_tasks(f"file://{repo}", target_numel=4096, timeout_s=20, license_allowlist=ALLOW, workers=1)
    assert [t.origin.class_name for t in res.tasks] == ["Swish"]
    o = res.tasks[0].origin
    assert (o.commit, o.license, o.path) == (head, "mit", "acts/swish.py")
    assert res.tasks[0].init_inputs == "[]"

    with pytest.raises(InputError) as e:
        list(iter_repos(f"file://{tmp_path}/no-such-repo.git"))
    assert "no-such-repo.git" in str(e.value)


def test_hf_dataset_saved_to_disk_and_parquet(tmp_path):
    import datasets

    rows = {
        "content": [SWISH, SWISH.replace("Swish", "GPLSwish"), "def broken(:\n", "x = 1\n"],
        "repo_name": ["org/acts", "org/gpl", "org/bad", "org/none"],
        "path": ["acts.py", "gpl.py", "bad.py", "none.py"],
        "license": ["mit", "gpl-3.0", "mit", "mit"],
    }
    ds = datasets.Dataset.from_dict(rows)
    ds.save_to_disk(str(tmp_path / "saved"))
    ds.to_parquet(str(tmp_path / "code.parquet"))
    assert parse_hf_source("hf:org/name:code") == ("org/name", "code")
    for src in (f"hf:{tmp_path / 'saved'}", f"hf:{tmp_path / 'code.parquet'}:content"):
        res = mine_tasks(src, target_numel=4096, timeout_s=20, license_allowlist=ALLOW, workers=1)
        r = res.report
        assert r.files == 4 and r.file_skips["syntax_error"] == 1
        assert r.modules_found == 2 and dict(r.license_rejected) == {"gpl-3.0": 1}
        assert [(t.origin.repo, t.origin.path, t.origin.license) for t in res.tasks] == [("org/acts", "acts.py", "mit")]
    with pytest.raises(InputError):
        list(iter_repos(f"hf:{tmp_path / 'code.parquet'}:no_such_column"))


def test_huge_files_are_counted_not_read(tmp_path):
    (tmp_path / "big.py").write_text("# padding\n" * 5000 + SWISH)
    (tmp_path / "small.py").write_text(SWISH)
    groups = list(iter_repos(str(tmp_path), max_file_bytes=10_000))
    big = next(f for g in groups for f in g.files if f.path == "big.py")
    assert big.data is None and big.size > 10_000
