"""Schema round trips through real Parquet files, and the store's atomic/idempotent writes."""

import dataclasses

import pyarrow.parquet as pq
import pytest

from kernelmill import schema, store
from kernelmill.schema import (Candidate, Dialogue, Message, OpCount, Origin, RFTRow, RLRow, SFTRow, Task,
                               TensorSpec, TurnVerdict, Verdict)

REF = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(4, 4)]

def get_init_inputs():
    return []
'''


def samples():
    t = Task.from_code(REF, name="relu", source="seed", level=1, origin=Origin(repo="r", path="p.py"),
                       input_specs=[TensorSpec("x", [4, 4], "float32")],
                       output_specs=[TensorSpec("out0", [4, 4], "float32")],
                       op_histogram=[OpCount("aten.relu", 1)], flops=16, bytes_moved=128,
                       annotations={"ops": [{"op": "relu", "shape": [4, 4]}], "note": "ü"})
    c = Candidate(candidate_id=Candidate.make_id(t.task_id, "cpu", "code"), task_id=t.task_id, backend="cpu",
                  generator="teacher", code="code", turn=1, parent_id=None)
    v = Verdict(candidate_id=c.candidate_id, task_id=t.task_id, backend="cpu", stage_reached="timing",
                status="pass", compiled=True, correct=True, cheats=[], max_abs_err=1e-7, runtime_us=3.5,
                speedup_eager=1.2, reward=1.3, versions={"torch": "2.13"}, stage_seconds={"compile": 1.5})
    d = Dialogue(dialogue_id="d1", task_id=t.task_id, backend="cpu", generator="teacher",
                 messages=[Message("user", "write"), Message("assistant", "```python\nx\n```")],
                 turn_verdicts=[TurnVerdict(c.candidate_id, "timing", "pass", True, 1.3, 1.2)],
                 first_turn_reward=1.3, final_reward=1.3, num_turns=1, solved=True)
    s = SFTRow(id="s1", task_id=t.task_id, messages=d.messages, source="seed", generator="teacher", backend="cpu",
               level=1, num_turns=1, final_reward=1.3, speedup_eager=None)
    r = RFTRow(id="r1", task_id=t.task_id, prompt="p", completion="c", candidate_id=c.candidate_id,
               generator="teacher", backend="cpu", level=1, correct=True, stage_reached="timing", reward=1.3)
    rl = RLRow(id="l1", task_id=t.task_id, prompt="p", reference_code=REF, test_spec={"trials": 5}, level=1,
               difficulty=0.5, pass_rate=0.5, n_samples=4, backend="cpu")
    return [t, c, v, d, s, r, rl]


@pytest.mark.parametrize("record", samples(), ids=lambda r: type(r).__name__)
def test_parquet_round_trip(record, tmp_path):
    cls = type(record)
    table = schema.to_table([record])
    assert table.schema == schema.arrow_schema(cls)
    pq.write_table(table, tmp_path / "x.parquet")
    back = schema.from_table(cls, pq.read_table(tmp_path / "x.parquet"))
    assert back == [record]
    assert dataclasses.asdict(back[0]) == dataclasses.asdict(record)


def test_every_table_has_a_schema_and_id_field():
    for name, cls in schema.TABLES.items():
        s = schema.arrow_schema(cls)
        assert cls.id_field in s.names, name


def test_task_id_ignores_comments_and_layout():
    other = REF.replace("return torch.relu(x)", "return torch.relu(x)   # activation") + "\n\n# trailing\n"
    assert schema.task_id_for(other) == schema.task_id_for(REF)
    assert schema.task_id_for(REF.replace("relu", "sigmoid")) != schema.task_id_for(REF)


def test_store_is_idempotent_and_atomic(tmp_path):
    t = samples()[0]
    t2 = dataclasses.replace(t, task_id="tother", name="other")
    assert store.write_records(tmp_path, "tasks", [t]) == 1
    assert store.write_records(tmp_path, "tasks", [t, t2]) == 1  # t already stored
    assert store.write_records(tmp_path, "tasks", [t, t2]) == 0
    files = list((tmp_path / "tasks").glob("*"))
    assert all(f.suffix == ".parquet" and not f.name.startswith(".tmp") for f in files)
    got = store.read_records(tmp_path, "tasks")
    assert sorted(x.task_id for x in got) == sorted([t.task_id, "tother"])


def test_store_rejects_wrong_record_type(tmp_path):
    with pytest.raises(TypeError, match="holds Task"):
        store.write_records(tmp_path, "tasks", [samples()[1]])


def test_empty_table_reads_with_schema(tmp_path):
    t = store.read_arrow(tmp_path, "verdicts")
    assert t.num_rows == 0 and "reward" in t.schema.names


def test_a_verdicts_table_written_before_a_field_existed_reads_with_its_default(tmp_path):
    """A resumed run reads part files an older kernelmill wrote: a Verdict field added since (the speedup's
    interval) is None there, the other fields as written."""
    v = Verdict("c1", task_id="t1", status="pass", correct=True, speedup_eager=2.0, reward=2.0)
    assert store.write_records(tmp_path, "verdicts", [v]) == 1
    (part,) = (tmp_path / "verdicts").glob("*.parquet")
    pq.write_table(pq.read_table(part).drop_columns(["speedup_lo", "speedup_hi"]), part)
    (got,) = store.read_records(tmp_path, "verdicts")
    assert got == v and got.speedup_lo is None and got.speedup_hi is None
