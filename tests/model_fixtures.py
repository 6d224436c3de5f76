"""A tiny trained checkpoint for the tests that serve or sample a real model (test_loop_rl, test_serve_model):
train/sft.py for a few steps on procedural tasks whose prompts are the generate stage's own."""

from pathlib import Path

from kernelmill import store
from kernelmill.schema import Message, SFTRow, Task, task_id_for
from synth.generate.prompts import build_prompt
from bench.lib.teacher_compact import answer
from bench.lib.task_families import generate_tasks, task_code


def train_tiny(root: Path, n_tasks: int = 6, steps: int = 4) -> tuple[Path, list[Task]]:
    """(checkpoint dir, tasks): a 1-layer model trained ``steps`` steps on ``n_tasks`` procedural tasks (cpu
    answers of the compact teacher); the corpus is written to ``root/corpus``, the run to ``root/sft``."""
    from train.model import latest_checkpoint
    from train.sft import train_sft

    tasks, rows = [], []
    for i, ft in enumerate(generate_tasks(n_tasks, seed=3)):
        ref = task_code(ft)
        task = Task.from_code(ref, name=f"family_{i}", source="teacher", level=1)
        msgs = build_prompt(task, "cpu") + [Message("assistant", f"```python\n{answer(ft, 'cpu')}```")]
        tasks.append(task)
        rows.append(SFTRow(id="s" + task.task_id, task_id=task_id_for(ref), messages=msgs, source="teacher",
                           generator="teacher_compact", backend="cpu", level=1, num_turns=1, final_reward=1.0))
    store.write_records(root / "corpus", "sft", rows)
    res = train_sft(root / "corpus", root / "sft", steps=steps, batch_size=2, lr=3e-3, warmup=1, max_len=1024,
                    save_every=0, heldout_frac=0.0, vocab_size=2048, n_layer=1, d_model=32, n_head=2, device="cpu",
                    log_every=0, split_words=False, split_digits=True)
    assert res["steps_done"] == steps
    return latest_checkpoint(root / "sft"), tasks
