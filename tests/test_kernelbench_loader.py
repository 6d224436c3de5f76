"""The KernelBench-format loader: the seed set, a level tree made here, and files that do not fit."""

from pathlib import Path

import pytest

from graphs.kernelbench import TaskFormatError, load_kernelbench_dir, load_task_file
from kernelmill.config import DATA_DIR

GOOD = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k
    def forward(self, x):
        return x * self.k

def get_inputs():
    return [torch.randn(8, 8)]

def get_init_inputs():
    return [3.0]
'''


def test_seed_tasks_load_with_levels():
    res = load_kernelbench_dir(DATA_DIR / "seed_tasks")
    assert len(res.tasks) >= 12 and not res.errors
    levels = {t.name: t.level for t in res.tasks}
    assert levels["1_ReLU"] == 1 and levels["11_Matmul_Bias_ReLU"] == 2
    assert len({t.task_id for t in res.tasks}) == len(res.tasks)


def test_level_folders_and_duplicates(tmp_path: Path):
    (tmp_path / "level1").mkdir()
    (tmp_path / "level3").mkdir()
    (tmp_path / "level1" / "a.py").write_text(GOOD)
    (tmp_path / "level3" / "b.py").write_text(GOOD.replace("x * self.k", "x + self.k"))
    (tmp_path / "level3" / "copy.py").write_text("# same program, new comment\n" + GOOD)
    res = load_kernelbench_dir(tmp_path)
    assert [(t.name, t.level) for t in res.tasks] == [("a", 1), ("b", 3)]
    assert res.tasks[0].origin.path == "level1/a.py"


@pytest.mark.parametrize("text,problem", [
    ("def get_inputs(): return []\ndef get_init_inputs(): return []\n", "missing class Model"),
    (GOOD.replace("def get_init_inputs", "def other"), "missing def get_init_inputs()"),
    (GOOD.replace("    def forward(self, x):\n        return x * self.k\n", "    pass\n"), "no forward method"),
    ("class Model(:\n", "not valid Python"),
])
def test_bad_files_name_file_and_problem(tmp_path: Path, text, problem):
    f = tmp_path / "bad.py"
    f.write_text(text)
    with pytest.raises(TaskFormatError) as ei:
        load_task_file(f)
    assert str(f) in str(ei.value) and problem in str(ei.value)


def test_non_strict_collects_errors_and_keeps_good_files(tmp_path: Path):
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "bad.py").write_bytes(b"\xff\xfe\x00binary")
    res = load_kernelbench_dir(tmp_path, strict=False)
    assert [t.name for t in res.tasks] == ["good"]
    assert len(res.errors) == 1 and "bad.py" in str(res.errors[0]) and "UTF-8" in str(res.errors[0])
    with pytest.raises(TaskFormatError, match="bad.py"):
        load_kernelbench_dir(tmp_path, strict=True)


# ---------------------------------------------------------------------------- loading at scale
# KernelBench-style programs written for these tests (never KernelBench's own files). They load with
# the annotation worker's address space capped at 3 GiB: a program run on real data of KernelBench's
# sizes (6.4 GB input, 16 GB of weights) would fail there, so passing shows nothing was allocated.

HUGE_RELU_CUDA = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.rand(4096, 393216).cuda()]

def get_init_inputs():
    return []
'''

DEVICE_INPUTS = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 32).cuda().half()

    def forward(self, x, y):
        return self.lin(x.to("cuda:0")) + y

def get_inputs():
    return [torch.randn(16, 64, device="cuda", dtype=torch.float16),
            torch.randn(16, 32, dtype=torch.float16).to(torch.device("cuda"))]

def get_init_inputs():
    return []
'''

INIT_AND_NON_TENSOR = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n_in, n_out, scale):
        super().__init__()
        self.lin = nn.Linear(n_in, n_out)
        self.scale = scale

    def forward(self, x, k, mode):
        y = self.lin(x) * self.scale
        return y * k if mode == "mul" else y

def get_inputs():
    return [torch.randn(8, 32), 3, "mul"]

def get_init_inputs():
    return [32, 16, 0.5]
'''

BIG_WEIGHTS = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n, bias=False)

    def forward(self, x):
        return self.lin(x)

def get_inputs():
    return [torch.randn(4, 65536)]

def get_init_inputs():
    return [65536]
'''

DATA_DEPENDENT = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x[x > 0].sum().reshape(1) * x.shape[0]

def get_inputs():
    return [torch.ones(32, 8)]

def get_init_inputs():
    return []
'''

NEEDS_MODULE = GOOD.replace("import torch.nn as nn", "import torch.nn as nn\nimport kernelmill_no_such_module")
RAISES = GOOD.replace("return x * self.k", "raise ValueError('bad shape on purpose')")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """``kernelmill load`` of a level tree of the programs above, and a second load of the same tree."""
    from kernelmill import store
    from flows.cli import main

    kb, out = tmp_path_factory.mktemp("kb"), tmp_path_factory.mktemp("out")
    files = {"level1/19_HugeReLU.py": HUGE_RELU_CUDA, "level1/2_DeviceInputs.py": DEVICE_INPUTS,
             "level2/3_InitAndNonTensor.py": INIT_AND_NON_TENSOR, "level3/4_BigWeights.py": BIG_WEIGHTS,
             "level3/5_DataDependent.py": DATA_DEPENDENT, "level4/6_NeedsModule.py": NEEDS_MODULE,
             "level4/7_Raises.py": RAISES}
    for rel, code in files.items():
        (kb / rel).parent.mkdir(parents=True, exist_ok=True)
        (kb / rel).write_text(code)
    argv = ["load", str(kb), "--out", str(out), "--set", "annotate.memory_limit_gb=3", "--set", "annotate.timeout_s=60"]
    assert main(argv) == 0
    first = {t.origin.path: t for t in store.read_records(out, "tasks")}
    assert main(argv) == 0  # resumes: nothing new to do
    return first, store.read_records(out, "tasks"), out


def test_huge_device_input_loads_without_allocating_it(loaded):
    tasks, _, _ = loaded
    t = tasks["level1/19_HugeReLU.py"]
    n = 4096 * 393216
    assert [(s.shape, s.dtype) for s in t.input_specs] == [([4096, 393216], "float32")]
    assert t.flops == n and t.bytes_moved == 2 * 4 * n
    assert t.annotations["traced_with"] == "fake" and t.annotations["requested_devices"] == ["cuda"]


def test_device_placement_in_inputs_and_constructor_maps_to_cpu(loaded):
    tasks, _, _ = loaded
    t = tasks["level1/2_DeviceInputs.py"]
    assert [(s.name, s.shape, s.dtype) for s in t.input_specs] == [("x", [16, 64], "float16"), ("y", [16, 32], "float16")]
    assert t.output_specs[0].shape == [16, 32] and t.output_specs[0].dtype == "float16"
    assert t.flops == 2 * 16 * 32 * 64 + 16 * 32 + 16 * 32  # addmm (with bias) + add
    assert t.annotations["requested_devices"] == ["cuda"]


def test_init_inputs_and_non_tensor_inputs(loaded):
    tasks, _, _ = loaded
    t = tasks["level2/3_InitAndNonTensor.py"]
    assert t.init_inputs == "[32, 16, 0.5]"
    assert [s.name for s in t.input_specs] == ["x"]  # k and mode are not tensors
    assert t.flops == 2 * 8 * 16 * 32 + 8 * 16 + 8 * 16 + 8 * 16  # addmm + two muls
    assert t.bytes_moved == 4 * (8 * 32 + 16 * 32 + 16 + 8 * 16)
    assert t.level == 2 and t.annotations["given_level"] == 2


def test_big_weights_are_counted_not_allocated(loaded):
    tasks, _, _ = loaded
    t = tasks["level3/4_BigWeights.py"]
    n = 65536
    assert t.flops == 2 * 4 * n * n
    assert t.bytes_moved == 4 * (4 * n + n * n + 4 * n)


def test_data_dependent_program_falls_back_to_a_real_run(loaded):
    tasks, _, _ = loaded
    t = tasks["level3/5_DataDependent.py"]
    assert t.annotations["traced_with"] == "real" and "nonzero" in t.annotations["fake_error"]
    assert t.output_specs[0].shape == [1]


def test_failures_are_named_with_a_category_and_not_retried(loaded):
    import json

    first, again, out = loaded
    failures = {f["path"]: f for f in json.loads((out / "annotate_failures.json").read_text())["failures"]}
    assert set(failures) == {"level4/6_NeedsModule.py", "level4/7_Raises.py"}
    assert failures["level4/6_NeedsModule.py"]["category"] == "missing-module"
    assert "kernelmill_no_such_module" in failures["level4/6_NeedsModule.py"]["reason"]
    assert failures["level4/7_Raises.py"]["category"] == "program-error"
    assert "bad shape on purpose" in failures["level4/7_Raises.py"]["reason"]
    assert len(first) == 5 and sorted(t.task_id for t in again) == sorted(t.task_id for t in first.values())


def test_interrupted_annotation_keeps_what_was_done_and_resumes(tmp_path: Path):
    """Ctrl-C after the second program: its rows are written; the next call does only the rest."""
    from kernelmill import store
    from synth.annotate.store import annotate_into

    tasks = [load_task_file(_write(tmp_path / f"p{i}.py", GOOD.replace("x * self.k", f"x * self.k + {i}")))
             for i in range(5)]

    def interrupt(done, total):
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        annotate_into(tmp_path / "run", tasks, workers=1, progress=interrupt, flush_every=100, flush_s=1e9)
    first = store.stored_ids(tmp_path / "run", "tasks")
    assert len(first) == 2
    seen = []
    rep = annotate_into(tmp_path / "run", tasks, workers=1, progress=lambda d, t: seen.append((d, t)))
    assert rep.already == 2 and rep.todo == 3 and rep.written == 3 and seen[-1] == (3, 3)
    assert sorted(t.task_id for t in store.read_records(tmp_path / "run", "tasks")) == sorted(t.task_id for t in tasks)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
