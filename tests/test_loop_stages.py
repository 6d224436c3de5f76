"""The loop's sampling and verification steps at the scale of k samples per task: the verify stage
judges identical code once (a confident model writes the same kernel in most of its k samples) and
stores a verdict for every candidate under its own id."""

from kernelmill import store
from kernelmill.config import load_settings
from kernelmill.schema import Candidate, Task
from orchestrator.stages import BY_NAME
from synth.generate.generators import dialogue_id_for

REF = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
       "        return torch.relu(x)\n\n\ndef get_inputs():\n    return [torch.randn(8, 8)]\n\n\n"
       "def get_init_inputs():\n    return []\n")


def test_verify_stage_judges_identical_samples_once(tmp_path):
    task = Task.from_code(REF, name="relu", source="teacher", level=1)
    # answers with no ModelNew: the verifier stops at extraction, so nothing is compiled here
    texts = ["I would write a kernel.", "I would write a kernel.", "I would write a kernel.", "no code at all"]
    cands = [Candidate(candidate_id=Candidate.make_id(task.task_id, "cpu", t, dialogue_id_for(task.task_id, "cpu", "m", i)),
                       task_id=task.task_id, backend="cpu", generator="m", code=t, response=t,
                       dialogue_id=dialogue_id_for(task.task_id, "cpu", "m", i)) for i, t in enumerate(texts)]
    store.write_records(tmp_path, "tasks", [task])
    store.write_records(tmp_path, "candidates", cands)
    counts = BY_NAME["verify"].run(tmp_path, load_settings(None, {"run.backend": "cpu"}), lambda *a: None)
    assert counts["candidates"] == 4 and counts["reused"] == 2 and counts["written"] == 4
    verdicts = {v.candidate_id: v for v in store.read_records(tmp_path, "verdicts")}
    assert set(verdicts) == {c.candidate_id for c in cands}
    assert len({(verdicts[c.candidate_id].status, verdicts[c.candidate_id].feedback) for c in cands[:3]}) == 1
    assert all(v.task_id == task.task_id and not v.correct for v in verdicts.values())
    again = BY_NAME["verify"].run(tmp_path, load_settings(None, {"run.backend": "cpu"}), lambda *a: None)
    assert again["candidates"] == 0  # resumable as before: nothing verified twice
