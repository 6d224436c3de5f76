"""Mining is deterministic under load: input sizes come from the program (FLOPs and elements written,
counted by torch's dispatcher), never from wall time, so the same source mined on an idle machine and on
one whose cores are all busy gives the same task ids and shapes. Real mining (sandboxed deduction, the
program run from its own file), real busy processes."""

import multiprocessing as mp
import os
import shutil
from pathlib import Path

from synth.mine.input_synthesis import InputGuess, forward_work
from synth.mine.miner import mine_tasks

ROOT = Path(__file__).resolve().parent.parent
ALLOW = ["mit", "apache-2.0", "bsd-3-clause", "bsd-2-clause", "unknown"]


def _spin() -> None:
    while True:
        pass


def _mine(src: Path) -> dict:
    res = mine_tasks(str(src), target_numel=1 << 20, timeout_s=30, license_allowlist=ALLOW, workers=1,
                     scale_work=2e8)
    return {t.task_id: [list(s.shape) for s in t.input_specs] for t in res.tasks}


def test_same_task_ids_idle_and_under_load(tmp_path):
    src = tmp_path / "textmodels"
    shutil.copytree(ROOT / "data" / "sample_repos" / "textmodels", src)
    idle = _mine(src)
    assert idle, "nothing mined"
    ctx = mp.get_context("fork")
    busy = [ctx.Process(target=_spin, daemon=True) for _ in range(2 * (os.cpu_count() or 2))]
    for p in busy:
        p.start()
    try:
        loaded = _mine(src)
    finally:
        for p in busy:
            p.kill()
            p.join()
    assert loaded == idle


def test_forward_work_is_a_property_of_the_shapes():
    import torch

    model = torch.nn.Linear(64, 32)
    g = InputGuess("float", [16, 64])
    _, w1 = forward_work(model, [g])
    g2 = g.copy()
    g2.shape[0] *= 2
    _, w2 = forward_work(model, [g2])
    assert w1 >= 2 * 16 * 64 * 32 and 1.9 * w1 < w2 <= 2 * w1 and forward_work(model, [g])[1] == w1


def test_mine_reports_progress_per_module(tmp_path):
    src = tmp_path / "textmodels"
    shutil.copytree(ROOT / "data" / "sample_repos" / "textmodels", src)
    seen = []
    res = mine_tasks(str(src), target_numel=1 << 16, timeout_s=30, license_allowlist=ALLOW, workers=1,
                     scale_work=1e7, progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1] == res.report.license_allowed
    assert [d for d, _ in seen] == list(range(1, len(seen) + 1))
