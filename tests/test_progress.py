"""What `kernelmill run` shows while it works. Off a terminal (a log file, a pipe, `make run > log`): a start
and an end line for every stage, progress lines at most once per `run.progress_every_s` per stage plus the
last one, and at the end a compact table instead of a JSON dump (the JSON goes to a file). On a terminal: a
bar per stage, with the log lines printed while the bars are live drawn above them, not into them. The real
CLI in a subprocess (real load and annotate stages) and a real rich console."""

import io
import json
import logging
import re

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
