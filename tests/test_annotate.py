"""Annotation: shapes, FLOPs and bytes of known programs against hand-computed values, the level
rule, the curriculum order, worker isolation (errors, hangs, crashes), and DuckDB queries over a
written tasks table. Programs run in the annotation worker process on fake tensors (no data), as
annotation always does; a test below checks that a real run records the same trace."""

import os
import textwrap

import pytest

from kernelmill import store
from kernelmill.schema import Task
from synth.annotate.annotator import annotate_tasks, difficulty_for, level_for, order_curriculum
from synth.annotate.devices import get_device

MATMUL = textwrap.dedent("""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def forward(self, A, B):
            return torch.matmul(A, B)

    def get_inputs():
        return [torch.randn(64, 32), torch.randn(32, 48)]

    def get_init_inputs():
        return []
""")

CONV = textwrap.dedent("""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, kernel_size=3, padding=1)

        def forward(self, x):
            return self.conv(x)

    def get_inputs():
        return [torch.randn(2, 3, 16, 16)]

    def get_init_inputs():
        return [3, 8]
""")

SOFTMAX = textwrap.dedent("""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def forward(self, x):
            return torch.softmax(x, dim=-1)

    def get_inputs():
        return [torch.randn(32, 100)]

    def get_init_inputs():
        return []
""")

CHAIN = textwrap.dedent("""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def forward(self, x, y):
            return torch.tanh(x * 2.0 + y)

    def get_inputs():
        return [torch.randn(128, 64), torch.randn(128, 64)]

    def get_init_inputs():
        return []
""")

RAISES = MATMUL.replace("return torch.matmul(A, B)", "raise ValueError('boom in forward')")
HANGS = SOFTMAX.replace("return torch.softmax(x, dim=-1)", "while True:\n            pass")
CRASHES = SOFTMAX.replace("return torch.softmax(x, dim=-1)", "import os\n        os._exit(3)")
PRINTS = SOFTMAX.replace("return torch.softmax(x, dim=-1)", "print('noise on stdout')\n        return x.relu()")

TIMEOUT_S = 5


def _task(code, name, level=0):
    return Task.from_code(code, name=name, source="seed", level=level)


@pytest.fixture(scope="session")
def annotated():
    """One annotate_tasks call (one worker, replaced after the hang and the crash) for all programs."""
    tasks = [_task(MATMUL, "matmul"), _task(CONV, "conv"), _task(SOFTMAX, "softmax"), _task(CHAIN, "chain", level=1),
             _task(RAISES, "raises"), _task(HANGS, "hangs"), _task(CRASHES, "crashes"), _task(PRINTS, "prints")]
    done, failures = annotate_tasks(tasks, device_spec="H100-SXM", timeout_s=TIMEOUT_S)
    return {t.name: t for t in done}, dict(failures), {t.name: t.task_id for t in tasks}


def test_matmul_shapes_flops_bytes(annotated):
    by_name, _, _ = annotated
    t = by_name["matmul"]
    assert [(s.name, s.shape, s.dtype) for s in t.input_specs] == [("A", [64, 32], "float32"), ("B", [32, 48], "float32")]
    assert [(s.shape, s.dtype) for s in t.output_specs] == [([64, 48], "float32")]
    assert t.flops == 2 * 64 * 48 * 32
    assert t.bytes_moved == 4 * (64 * 32 + 32 * 48 + 64 * 48)
    assert {o.op: o.count for o in t.op_histogram} == {"aten.mm": 1}
    mm = [op for op in t.annotations["ops"] if op["op"].startswith("aten.mm")]
    assert mm[0]["inputs"] == [[[64, 32], "float32"], [[32, 48], "float32"]]
    assert mm[0]["outputs"] == [[[64, 48], "float32"]]
    assert t.level == 1 and t.annotations["rule_level"] == 1


def test_conv2d_flops_count_weights_and_bias(annotated):
    by_name, _, _ = annotated
    t = by_name["conv"]
    n, cout, h, w, cin, k = 2, 8, 16, 16, 3, 3
    assert t.output_specs[0].shape == [n, cout, h, w]
    assert t.flops == 2 * n * cout * h * w * cin * k * k + n * cout * h * w
    weights = cout * cin * k * k + cout
    assert t.bytes_moved == 4 * (n * cin * h * w + weights + n * cout * h * w)
    assert t.init_inputs == "[3, 8]"
    assert "aten.convolution" in {o.op for o in t.op_histogram}
    assert t.annotations["heavy_ops"] == 1


def test_softmax_flops_and_roofline_floor(annotated):
    by_name, _, _ = annotated
    t = by_name["softmax"]
    assert t.flops == 5 * 32 * 100
    assert t.bytes_moved == 2 * 4 * 32 * 100
    h100 = get_device("H100-SXM")
    expected = max(t.flops / 67e12, t.bytes_moved / 3.35e12) * 1e6
    assert t.floor_time_us == pytest.approx(expected)
    assert t.annotations["bound"] == "memory"
    assert t.annotations["device_spec"]["name"] == h100.name


def test_chain_rule_level_recorded_but_given_level_kept(annotated):
    by_name, _, _ = annotated
    t = by_name["chain"]
    assert t.annotations["compute_ops"] == 3  # mul, add, tanh
    assert t.annotations["rule_level"] == 2
    assert t.level == 1 and t.annotations["given_level"] == 1
    assert t.difficulty == pytest.approx(difficulty_for(1, t.flops, t.bytes_moved))


def test_failures_are_reported_and_the_run_goes_on(annotated):
    by_name, failures, ids = annotated
    assert "boom in forward" in failures[ids["raises"]] and "ValueError" in failures[ids["raises"]]
    assert failures[ids["hangs"]].startswith("timeout")
    assert "crashed" in failures[ids["crashes"]] and "3" in failures[ids["crashes"]]
    # the task after the crash ran in a fresh worker; its print did not disturb the protocol
    assert by_name["prints"].output_specs[0].shape == [32, 100]
    assert set(by_name) == {"matmul", "conv", "softmax", "chain", "prints"}


def test_level_rule_boundaries():
    assert [level_for(n, 0) for n in (0, 1, 2, 6, 7, 30, 31)] == [1, 1, 2, 2, 3, 3, 4]
    assert level_for(3, 2) == 3  # several heavy ops make a block
    assert level_for(3, 1) == 2


def test_order_curriculum_level_then_size(annotated):
    by_name, _, _ = annotated
    tasks = list(by_name.values())
    ordered = order_curriculum(tasks)
    keys = [(t.level, t.difficulty) for t in ordered]
    assert keys == sorted(keys)
    small = [t for t in ordered if t.level == 1]
    assert small.index(by_name["softmax"]) < small.index(by_name["conv"])  # fewer flops+bytes first


def test_unknown_device_is_a_clear_error():
    from kernelmill.errors import InputError

    with pytest.raises(InputError, match="unknown device 'B300'.*H100-SXM"):
        annotate_tasks([_task(SOFTMAX, "s")], device_spec="B300")


def test_duckdb_tasks_by_level_and_by_op(annotated, tmp_path):
    import duckdb

    by_name, _, _ = annotated
    store.write_records(tmp_path, "tasks", list(by_name.values()))
    root = tmp_path.as_posix()
    con = duckdb.connect()
    by_level = dict(con.execute(f"SELECT level, count(*) FROM read_parquet('{root}/tasks/*.parquet') "
                            "GROUP BY level").fetchall())
    assert by_level == {1: 5}
    by_op = con.execute(f"""
        SELECT h.op, list(name ORDER BY name) FROM
          (SELECT name, unnest(op_histogram) AS h FROM read_parquet('{root}/tasks/*.parquet'))
        GROUP BY h.op ORDER BY h.op""").fetchall()
    ops = dict(by_op)
    assert ops["aten.mm"] == ["matmul"]
    assert ops["aten._softmax"] == ["softmax"]
    assert ops["aten.tanh"] == ["chain"]
    flops = con.execute(f"SELECT flops FROM read_parquet('{root}/tasks/*.parquet') WHERE name = 'matmul'").fetchone()[0]
    assert flops == 2 * 64 * 48 * 32
    rule = con.execute(f"SELECT json_extract(annotations, '$.rule_level')::INT FROM "
                   f"read_parquet('{root}/tasks/*.parquet') WHERE name = 'chain'").fetchone()[0]
    assert rule == 2


def test_annotate_cli_writes_a_new_table(annotated, tmp_path):
    from flows.cli import main

    run, out = tmp_path / "run", tmp_path / "out"
    store.write_records(run, "tasks", [_task(SOFTMAX, "softmax"), _task(RAISES, "raises")])
    assert main(["annotate", str(run), "--out", str(out), "--device-spec", "A100"]) == 0
    got = store.read_records(out, "tasks")
    assert [t.name for t in got] == ["softmax"]
    assert got[0].annotations["device_spec"]["name"] == "A100"
    assert main(["annotate", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert not os.path.exists(tmp_path / "missing")


@pytest.mark.parametrize("name,code", [("matmul", MATMUL), ("conv", CONV), ("softmax", SOFTMAX), ("chain", CHAIN)])
def test_fake_tensor_trace_equals_a_real_run(name, code):
    """Annotation traces on fake tensors; the ops, shapes, weights and outputs it records are the
    ones a run on real data records (so shapes, FLOPs and bytes are unchanged by going fake)."""
    from synth.annotate.trace_worker import trace_program

    fake, real = trace_program(code, mode="fake"), trace_program(code, mode="real")
    assert fake["traced_with"] == "fake" and real["traced_with"] == "real"
    for key in ("records", "inputs", "weights", "outputs", "init_inputs"):
        assert fake[key] == real[key], key
