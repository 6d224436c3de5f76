"""What `kernelmill run` shows while it works. Off a terminal (a log file, a pipe, `make run > log`): a start
and an end line for every stage, progress lines at most once per `run.progress_every_s` per stage plus the
last one, and at the end a compact table instead of a JSON dump (the JSON goes to a file). On a terminal: a
bar per stage, with the log lines printed while the bars are live drawn above them, not into them. The real
CLI in a subprocess (real load and annotate stages) and a real rich console."""

import io
import json
import logging
import re
import time

from flows_fixtures import run_kernelmill


def test_off_a_terminal_every_stage_prints_rate_limited_lines_and_a_compact_table(tmp_path):
    run_dir = tmp_path / "run"
    r = run_kernelmill("run", "--no-prefect", "--stages", "load,annotate", "--out", str(run_dir),
                       "--set", "run.progress_every_s=4")  # the 13 seed tasks: about 10 s of annotation
    assert r.returncode == 0, r.stderr[-3000:]
    err = r.stderr.splitlines()
    for stage in ("load", "annotate"):
        assert sum(line.startswith(f"[{stage}] started") for line in err) == 1, r.stderr
        assert sum(line.startswith(f"[{stage}] done in ") for line in err) == 1, r.stderr
    progress = [line for line in err if re.match(r"\[annotate\] \d+/13 \(\d+ s\)$", line)]
    assert progress and progress[-1].startswith("[annotate] 13/13")  # the last step is always shown
    done = next(line for line in err if line.startswith("[annotate] done in "))
    seconds = int(re.search(r"done in (\d+) s", done).group(1))
    assert len(progress) <= seconds // 4 + 2, progress  # one line per 4 s at most, and the last
    assert "annotated 13" in done
    assert "\x1b[" not in r.stderr and "\r" not in r.stderr  # no control characters in a log file

    out = r.stdout
    assert "{" not in out  # no JSON dump
    table = out.splitlines()
    assert table[0].split() == ["stage", "seconds", "counts"]
    assert any(line.startswith("load ") and "tasks 13" in line for line in table)
    assert any(line.startswith("annotate ") and "annotated 13" in line for line in table)
    assert len(out.splitlines()) < 20
    counts = json.loads((run_dir / "run_counts.json").read_text())  # every count, nested ones too
    assert counts["load"]["tasks"] == 13 and counts["annotate"]["annotated"] == 13
    assert f"every count: {run_dir / 'run_counts.json'}" in out


def test_on_a_terminal_log_lines_print_above_the_bars(capfd):
    """A Prefect console handler (and a plain stderr handler) logging while the bars are live print through
    the bars' console, so the line lands above the bars instead of inside one."""
    from prefect.logging.handlers import PrefectConsoleHandler
    from rich.console import Console

    from orchestrator.progress import StageProgress

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=100)
    log = logging.getLogger("kernelmill-test-progress")
    log.propagate = False
    prefect_handler, plain = PrefectConsoleHandler(stream=__import__("sys").__stderr__), logging.StreamHandler(
        __import__("sys").__stderr__)
    log.addHandler(prefect_handler)
    log.addHandler(plain)
    log.setLevel(logging.INFO)
    try:
        with StageProgress(console=console) as shown:
            shown("verify", 1, 4)
            log.info("a log line while the bar is live")
            shown("verify", 4, 4)
        log.info("after the bars")
    finally:
        log.removeHandler(prefect_handler)
        log.removeHandler(plain)
    text = buf.getvalue()
    assert text.count("a log line while the bar is live") == 2  # both handlers, through the bars' console
    assert "4/4" in text and "after the bars" not in text
    err = capfd.readouterr().err
    assert "a log line while the bar is live" not in err and err.count("after the bars") == 2  # restored


def test_progress_lines_are_rate_limited_per_stage():
    from orchestrator.progress import StageProgress

    now = [0.0]
    buf = io.StringIO()
    from rich.console import Console

    shown = StageProgress(console=Console(file=buf, force_terminal=False), every_s=10, clock=lambda: now[0])
    shown.begin("verify")
    for i in range(1, 101):  # 100 candidates, one a second
        now[0] = float(i)
        shown("verify", i, 100)
    lines = [line for line in buf.getvalue().splitlines() if "/100" in line]
    assert lines == [f"[verify] {i}/100 ({i} s)" for i in range(10, 101, 10)]


def test_a_stage_with_lines_of_its_own_prints_no_count_lines_beside_them():
    """The verify stage prints a heartbeat and a line per verdict (``note``): a bare "[verify] 1/12 (69 s)" before
    each of them only repeated the count (a cold `make run` printed one above five of its twelve verdicts)."""
    from rich.console import Console

    from orchestrator.progress import StageProgress

    now = [0.0]
    buf = io.StringIO()
    shown = StageProgress(console=Console(file=buf, force_terminal=False), every_s=10, clock=lambda: now[0])
    shown.begin("verify")
    shown.begin("annotate")
    shown.note("verify", "verified 0/3, compiled 1, executing 0, pending 3 (15 s)")
    for i in range(1, 4):
        now[0] = 20.0 * i
        shown("verify", i, 3)
        shown.note("verify", f"{i}/3 c{i} pass (reward 1.00)")
        shown("annotate", i, 3)  # a stage without lines of its own keeps its count lines
    lines = buf.getvalue().splitlines()
    assert [ln for ln in lines if ln.startswith("[verify]")] == [
        "[verify] started", "[verify] verified 0/3, compiled 1, executing 0, pending 3 (15 s)",
        "[verify] 1/3 c1 pass (reward 1.00)", "[verify] 2/3 c2 pass (reward 1.00)", "[verify] 3/3 c3 pass (reward 1.00)"]
    assert [ln for ln in lines if ln.startswith("[annotate] ") and "/3" in ln] == [
        "[annotate] 1/3 (20 s)", "[annotate] 2/3 (40 s)", "[annotate] 3/3 (60 s)"]


def test_the_verify_stage_prints_a_heartbeat_while_it_works_and_each_verdict_as_it_comes(tmp_path, monkeypatch):
    """The verify stage's minutes of compiling before its first verdict are not silent: a line every
    ``run.progress_every_s`` (verified, compiled, executing, pending, elapsed) and one per verdict. The verifier is
    a fake here (a slow engine that holds its first verdict back until two heartbeats were printed, so nothing
    depends on the machine's speed); the stage, the reporter and the store are the real ones."""
    from rich.console import Console

    from flows_fixtures import seed_run_dir
    from kernelmill.schema import Verdict
    from kernelmill.config import load_settings
    from orchestrator import stages
    from orchestrator.pipeline import run_stage
    from orchestrator.progress import StageProgress
    from verifier import entry

    cands = seed_run_dir(tmp_path, ["honest", "torch_fallback"])
    buf = io.StringIO()

    def beats() -> list[str]:
        return [line for line in buf.getvalue().splitlines() if line.startswith("[verify] verified ")]

    def slow_verify(items, *, config, ray, compile_workers, on_verdict, stats):
        stats.live.update(compiled=0, executing=0)
        deadline = time.monotonic() + 60
        for i, (task, cand) in enumerate(items):
            stats.live["compiled"] += 1
            stats.live["executing"] = 1
            seen = len(beats())
            while len(beats()) < seen + 2 and time.monotonic() < deadline:  # two heartbeats before each verdict
                time.sleep(0.01)
            stats.live["executing"] = 0
            on_verdict(i, Verdict(cand.candidate_id, task_id=task.task_id, backend="cpu", status="pass", correct=True,
                                  reward=1.0, speedup_eager=1.5, speedup_lo=0.9, speedup_hi=2.0))
        return []

    monkeypatch.setattr(entry, "verify", slow_verify)
    settings = load_settings(overrides={"run.progress_every_s": 0.05})
    with StageProgress(console=Console(file=buf, force_terminal=False), every_s=settings.run.progress_every_s):
        counts = run_stage(stages.BY_NAME["verify"], tmp_path, settings)
    assert counts["verified"] == 2
    lines = buf.getvalue().splitlines()
    first = next(i for i, line in enumerate(lines) if cands[0].candidate_id in line or cands[1].candidate_id in line)
    heartbeats = [line for line in lines[:first] if line.startswith("[verify] verified ")]
    assert len(heartbeats) >= 2, lines
    assert re.match(r"\[verify\] verified 0/2, compiled 1, executing 1, pending 2 \(\d+ s\)$", heartbeats[-1]), lines
    for c in cands:  # each verdict, as it came, with its status, reward and the speedup's interval
        assert any(re.match(rf"\[verify\] \d/2 {c.candidate_id} pass \(reward 1.00, 1.50x \[0.90, 2.00\]\) \(\d+ s\)$",
                            line) for line in lines), lines
    assert lines[-1].startswith("[verify] done in ")
    beat_count = len(beats())
    time.sleep(0.2)
    assert len(beats()) == beat_count  # the heartbeat ends with the stage
