"""Mining the shapes real repositories take (issue 17): keyword-only constructor and forward
parameters, constructor arguments that are other modules or come from the repository's own calls,
image classifiers that need a particular image side, masks and time steps, helpers defined twice.

One small repository is written to a temporary folder and mined once (real tree-sitter, real sandboxed
children); every task is then run from its own file in a fresh interpreter."""

import subprocess
import sys
import textwrap

import pytest

from graphs.kernelbench import check_kernelbench_source
from synth.mine.discover import RepoIndex, parse_file
from synth.mine.extract import extract_module
from synth.mine.miner import mine_tasks

ALLOW = ["mit"]

FILES = {
    "LICENSE": "MIT License\n\nPermission is hereby granted, free of charge, to any person obtaining a copy",
    "netlib/__init__.py": "",
    "netlib/blocks.py": '''
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class GatedMLP(nn.Module):
            """Keyword-only constructor and forward parameters (lucidrains style)."""
            def __init__(self, *, dim, hidden, eps=1e-5):
                super().__init__()
                self.up = nn.Linear(dim, hidden)
                self.down = nn.Linear(hidden, dim)
                self.eps = eps

            def forward(self, x, *, gate, scale=None):
                h = F.gelu(self.up(x)) * torch.sigmoid(gate.mean(-1, keepdim=True))
                return self.down(h) * (1.0 if scale is None else scale)


        class Residual(nn.Module):
            def __init__(self, fn):
                super().__init__()
                self.fn = fn

            def forward(self, x):
                return self.fn(x) + x


        class MaskedMean(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.proj = nn.Linear(dim, dim)

            def forward(self, x, mask):
                x = self.proj(x).masked_fill(~mask[..., None], 0.0)
                return x.sum(1) / mask.sum(1, keepdim=True).clamp(min=1)


        class TimeConditioned(nn.Module):
            def __init__(self, channels):
                super().__init__()
                self.conv = nn.Conv2d(channels, channels, 3, padding=1)
                self.to_scale = nn.Linear(1, channels)

            def forward(self, x, time):
                s = self.to_scale(time[:, None])[:, :, None, None]
                return self.conv(x) * (1 + s)
    ''',
    "netlib/resnet.py": '''
        import torch.nn as nn
        import torch.nn.functional as F


        class BasicBlock(nn.Module):
            expansion = 1

            def __init__(self, in_planes, planes):
                super().__init__()
                self.conv = nn.Conv2d(in_planes, planes, 3, padding=1, bias=False)
                self.bn = nn.BatchNorm2d(planes)

            def forward(self, x):
                return F.relu(self.bn(self.conv(x)))


        class TinyResNet(nn.Module):
            """Built by the factory below: the block class and the depths come from the call."""
            def __init__(self, block, num_blocks, num_classes=10):
                super().__init__()
                layers, planes = [], 3
                for n in num_blocks:
                    layers += [block(planes, 8 * block.expansion)]
                    planes = 8 * block.expansion
                self.body = nn.Sequential(*layers)
                self.head = nn.Linear(planes * 32 * 32, num_classes)  # CIFAR-sized images only

            def forward(self, x):
                return self.head(self.body(x).flatten(1))


        def tiny_resnet():
            return TinyResNet(BasicBlock, [1, 1])
    ''',
}


def _write(root):
    for path, text in FILES.items():
        f = root / path
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(textwrap.dedent(text))


@pytest.fixture(scope="module")
def mined(tmp_path_factory):
    root = tmp_path_factory.mktemp("netlib_repo")
    _write(root)
    return mine_tasks(str(root), target_numel=1 << 14, timeout_s=20, license_allowlist=ALLOW, workers=2)


def _task(mined, cls):
    rows = [m for m in mined.report.modules if m["class"] == cls]
    assert rows and rows[0]["outcome"] == "task", rows
    return next(t for t in mined.tasks if t.origin.class_name == cls)


def test_keyword_only_parameters_become_a_wrapped_kernelbench_task(mined):
    t = _task(mined, "GatedMLP")
    code = t.reference_code
    check_kernelbench_source(code)
    assert "class GatedMLP(nn.Module)" in code and "class Model(GatedMLP):" in code
    assert "super().__init__(dim=dim, hidden=hidden)" in code  # eps keeps its default
    assert "return super().forward(x, gate=gate)" in code  # scale keeps its default
    assert [s.name for s in t.input_specs] == ["x", "gate"]


def test_module_arguments_call_sites_image_sides_masks_and_time_steps(mined):
    assert "torch.nn.GELU()" in _task(mined, "Residual").init_inputs
    resnet = _task(mined, "TinyResNet")
    assert resnet.init_inputs == "[BasicBlock, [1, 1]]"  # the repository's own call, not a guess
    assert resnet.input_specs[0].shape[1:] == [3, 32, 32]  # the head fixes the image side
    masked = _task(mined, "MaskedMean")
    assert [s.dtype for s in masked.input_specs] == ["float32", "bool"]
    assert masked.input_specs[1].shape == masked.input_specs[0].shape[:2]
    timed = _task(mined, "TimeConditioned")
    assert timed.input_specs[1].shape == timed.input_specs[0].shape[:1]  # one time step per sample


def test_every_task_runs_from_its_own_file_in_a_new_interpreter(mined, tmp_path):
    assert mined.report.tasks_emitted == len(mined.tasks) >= 5
    files = []
    for t in mined.tasks:
        f = tmp_path / f"{t.name}.py"
        f.write_text(t.reference_code)
        files.append(str(f))
    # one new interpreter runs every file in turn (one torch import, not one per task)
    run = ("import runpy, torch, sys\n"
           "for path in sys.argv[1:]:\n"
           "    g = runpy.run_path(path)\n"
           "    m = g['Model'](*g['get_init_inputs']()).eval()\n"
           "    out = m(*g['get_inputs']())\n"
           "    assert isinstance(out, torch.Tensor) and out.is_floating_point(), path\n")
    r = subprocess.run([sys.executable, "-c", run, *files], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-1500:]


def test_helpers_defined_differently_in_two_files_are_both_kept():
    files = {
        "pkg/__init__.py": "",
        "pkg/attend.py": "from math import sqrt\n\n\ndef default(val, d):\n    return val if val is not None else d\n\n\n"
                         "def pick(a, b):\n    return default(a, b) * sqrt(1.0)\n",
        "pkg/layers.py": "import torch.nn as nn\nfrom numpy import sqrt\nfrom .attend import pick\n\n\n"
                         "def default(*args):\n    return next(a for a in args if a is not None)\n\n\n"
                         "class Mix(nn.Module):\n    def forward(self, x, y=None):\n"
                         "        return default(y, x) * pick(None, 2.0) * float(sqrt(1.0))\n",
    }
    parsed = [parse_file(p, t) for p, t in files.items()]
    index = RepoIndex(parsed)
    program = extract_module(index, next(p for p in parsed if p.path == "pkg/layers.py"), "Mix").program
    ns: dict = {}
    exec(compile(program, "mix.py", "exec"), ns)  # noqa: S102 - our own fixture
    import torch

    x = torch.ones(2)
    assert torch.equal(ns["Model"]()(x), 2 * x)  # layers' default(*args) and attend's default(val, d)
    assert "from math import sqrt" in program and "from numpy import sqrt as sqrt_" in program  # imports too


def test_a_method_parameter_does_not_hide_a_global_of_the_same_name():
    text = textwrap.dedent('''
        import torch.nn as nn
        cfg = {"small": [8, "M"]}


        class VGG(nn.Module):
            def __init__(self, name):
                super().__init__()
                self.features = self._make_layers(cfg[name])

            def _make_layers(self, cfg):
                return nn.Sequential(*[nn.MaxPool2d(2) if c == "M" else nn.Conv2d(3, c, 3) for c in cfg])
    ''')
    pf = parse_file("vgg.py", text)
    program = extract_module(RepoIndex([pf]), pf, "VGG").program
    assert 'cfg = {"small": [8, "M"]}' in program


def test_call_sites_give_constructor_arguments_and_skip_locals_and_side_effects():
    from synth.mine.callsites import find_call_sites
    from synth.mine.miner import with_call_sites

    files = {
        "nets/dpn.py": textwrap.dedent('''
            import torch.nn as nn


            class Block(nn.Module):
                def forward(self, x):
                    return x


            class DPN(nn.Module):
                def __init__(self, cfg, block, width=8):
                    super().__init__()
                    self.cfg, self.block = cfg, block

                def forward(self, x):
                    return x * self.cfg["scale"]


            def dpn_small():
                cfg = {"scale": 2.0}
                return DPN(cfg, Block, width=16)


            def inside(width):
                return DPN({"scale": 1.0}, Block, width=width)
        '''),
        "sample.py": textwrap.dedent('''
            import torch
            from nets.dpn import DPN, Block
            checkpoint = torch.load("out/ckpt.pt")
            model = DPN(checkpoint["cfg"], Block)
        '''),
    }
    parsed = [parse_file(p, t) for p, t in files.items()]
    index = RepoIndex(parsed)
    pf = next(p for p in parsed if p.path == "nets/dpn.py")
    sites = find_call_sites(index, pf, "DPN")
    jobs = [s.as_job() for s in sites]
    # the factory's local cfg stands for its value; a keyword that reads a parameter is left to guessing
    assert {"path": "nets/dpn.py", "args": ['{"scale": 2.0}', "Block"], "kwargs": {"width": "16"}} in jobs
    assert {"path": "nets/dpn.py", "args": ['{"scale": 1.0}', "Block"], "kwargs": {"width": None}} in jobs
    program, kept = with_call_sites(extract_module(index, pf, "DPN"), index, pf, "DPN")
    assert "torch.load" not in program and all(k["path"] == "nets/dpn.py" for k in kept)
    assert "class Block(nn.Module)" in program  # what the kept calls read is defined


def test_a_base_class_that_names_its_subclass_in_a_method_is_defined_first():
    text = textwrap.dedent('''
        import torch.nn as nn


        class Layers(nn.Module):
            def forward(self, x):
                return x * 2 if isinstance(self, Encoder) else x


        class Encoder(Layers):
            pass


        class Stack(nn.Module):
            def __init__(self):
                super().__init__()
                self.enc = Encoder()

            def forward(self, x):
                return self.enc(x)
    ''')
    pf = parse_file("layers.py", text)
    for cls in ("Layers", "Stack"):
        ns: dict = {}
        exec(compile(extract_module(RepoIndex([pf]), pf, cls).program, f"{cls}.py", "exec"), ns)  # noqa: S102
        assert issubclass(ns["Model"], ns["nn"].Module)


def test_constructor_arguments_say_what_the_image_is():
    from synth.mine.input_synthesis import init_hint

    assert init_hint({"image_size": 64, "patch_size": 8, "channels": 1}).shape == [2, 1, 64, 64]
    assert init_hint({"image_size": (32, 48), "dim": 16}).shape == [2, 3, 32, 48]
    assert init_hint({"image_size": 32, "frames": 4}).shape == [2, 3, 4, 32, 32]
    assert init_hint({"dim": 32}) is None


def test_constructor_guesses_modules_keyword_only_and_passed_on_keywords():
    import time

    import torch.nn as nn

    from synth.mine.init_args import construct

    class Residual(nn.Module):
        def __init__(self, fn, *, scale):
            super().__init__()
            self.fn, self.scale = fn, scale

    class Inner(nn.Module):
        def __init__(self, *, dim, depth):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(dim, dim) for _ in range(depth))

    class Outer(Inner):  # passes **kwargs on: depth is named only by the inner TypeError
        def __init__(self, *, dim, **kwargs):
            super().__init__(dim=dim, **kwargs)

    model, args, _ = next(construct(Residual, {}, [32], time.monotonic() + 10))
    assert isinstance(model.fn, nn.Module) and [(a.name, a.keyword) for a in args] == [("fn", False), ("scale", True)]
    model, args, _ = next(construct(Outer, {}, [32], time.monotonic() + 10))
    assert [a.name for a in args] == ["dim", "depth"] and all(a.keyword for a in args) and len(model.layers) == 2


# ---------------------------------------------------------------------------- wrappers of other models (issue 17)

WRAPPER_FILES = {
    "LICENSE": "MIT License\n\nPermission is hereby granted, free of charge, to any person obtaining a copy",
    "seqlib/__init__.py": "from seqlib.nets import TokenNet\nfrom seqlib.wrappers import LossWrapper, WidthMatched\n",
    "seqlib/nets.py": '''
        import torch.nn as nn


        class TokenNet(nn.Module):
            def __init__(self, num_tokens, max_seq_len, dim):
                super().__init__()
                self.max_seq_len = max_seq_len
                self.dim = dim
                self.token_emb = nn.Embedding(num_tokens, dim)
                self.to_logits = nn.Linear(dim, num_tokens)

            def forward(self, x):
                return self.to_logits(self.token_emb(x))
    ''',
    "seqlib/wrappers.py": '''
        import torch.nn as nn
        import torch.nn.functional as F


        class LossWrapper(nn.Module):
            """Takes another model of the repository and reads its attributes: built only in tests."""
            def __init__(self, net, ignore_index=-100):
                super().__init__()
                self.net = net
                self.max_seq_len = net.max_seq_len
                self.num_tokens = net.token_emb.num_embeddings
                self.ignore_index = ignore_index

            def forward(self, x):
                b, n = x.shape
                assert n == self.max_seq_len
                logits = self.net(x[:, :-1])
                return F.cross_entropy(logits.transpose(1, 2), x[:, 1:], ignore_index=self.ignore_index)


        class WidthMatched(nn.Module):
            """Its own `dim` must equal the wrapped model's."""
            def __init__(self, net, dim):
                super().__init__()
                self.net = net
                self.token_emb = net.token_emb
                self.norm = nn.LayerNorm(dim)

            def forward(self, x):
                return self.norm(self.net.token_emb(x))
    ''',
    "tests/test_seqlib.py": '''
        import torch
        from seqlib.nets import TokenNet


        def test_loss_wrapper():
            from seqlib import LossWrapper

            model = TokenNet(num_tokens=32, max_seq_len=12, dim=16)
            model = LossWrapper(model)
            assert model(torch.randint(0, 32, (2, 12))).ndim == 0
    ''',
}


@pytest.fixture(scope="module")
def mined_wrappers(tmp_path_factory):
    root = tmp_path_factory.mktemp("seqlib_repo")
    for path, text in WRAPPER_FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(textwrap.dedent(text))
    return mine_tasks(str(root), target_numel=1 << 12, timeout_s=20, license_allowlist=ALLOW, workers=2)


def test_a_wrapper_is_built_the_way_a_test_function_builds_it(mined_wrappers):
    """LossWrapper is imported inside the test function through the package's re-export, and its
    argument is the variable assigned on the line before: the task builds the same TokenNet, and the
    token ids are as long as the model's max_seq_len (the forward asserts it)."""
    t = _task(mined_wrappers, "LossWrapper")
    check_kernelbench_source(t.reference_code)
    assert "class TokenNet(nn.Module)" in t.reference_code
    assert t.init_inputs == "[TokenNet(num_tokens=32, max_seq_len=12, dim=16)]"
    assert t.input_specs[0].dtype == "int64" and t.input_specs[0].shape[1] == 12


def test_a_model_argument_nobody_passes_comes_from_a_class_that_has_what_it_reads(mined_wrappers):
    """WidthMatched is never called in the repository; it reads net.token_emb, which TokenNet sets, so a
    call of TokenNet (the test's) fills it, and its own `dim` is taken from the model (16), not guessed."""
    t = _task(mined_wrappers, "WidthMatched")
    assert t.init_inputs == "[TokenNet(num_tokens=32, max_seq_len=12, dim=16), 16]"
    assert t.input_specs[0].dtype == "int64"


def test_every_wrapper_task_runs_from_its_own_file(mined_wrappers, tmp_path):
    for t in mined_wrappers.tasks:
        f = tmp_path / f"{t.name}.py"
        f.write_text(t.reference_code)
        run = ("import runpy, torch, sys\ng = runpy.run_path(sys.argv[1])\n"
               "m = g['Model'](*g['get_init_inputs']()).eval()\nout = m(*g['get_inputs']())\n"
               "assert isinstance(out, torch.Tensor) and out.is_floating_point()\n")
        r = subprocess.run([sys.executable, "-c", run, str(f)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (t.name, r.stderr[-1000:])


def test_callable_and_weight_reading_parameters_get_modules():
    """`activation: Callable` is guessed as a module, not a number; a module whose constructor reads
    `module.weight` gets a Linear wider than the guessed sizes (a low rank below its width fits)."""
    import time
    from typing import Callable

    import torch.nn as nn

    from synth.mine.init_args import construct

    class GatedProj(nn.Module):
        def __init__(self, dim_in, dim_out, activation: Callable):
            super().__init__()
            self.proj, self.act = nn.Linear(dim_in, dim_out * 2), activation

    class LowRank(nn.Module):
        def __init__(self, module, rank):
            super().__init__()
            out_dim, in_dim = module.weight.shape
            assert rank < min(out_dim, in_dim)
            self.a = nn.Parameter(module.weight.new_zeros(out_dim, rank))

    model, args, _ = next(construct(GatedProj, {}, [32], time.monotonic() + 10))
    assert isinstance(model.act, nn.Module)
    model, args, _ = next(construct(LowRank, {}, [32], time.monotonic() + 10))
    assert isinstance(args[0].value, nn.Linear) and args[0].value.in_features > args[1].value
