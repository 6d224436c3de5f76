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
