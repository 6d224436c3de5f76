"""DuckDB over a run or corpus directory: one view per table, SQL in, rows out.

Views: tasks, candidates, verdicts, dialogues, sft, rft, rl (kernelmill.schema.TABLES). A view
reads ``<dir>/<table>/*.parquet``; a table with no files yet is still a view, empty, with the
columns of its Arrow schema, so a query written for a finished run also runs on a fresh one.
Struct and list columns (messages, op_histogram, input_specs) are DuckDB STRUCT / LIST values;
dict fields (annotations, test_spec, versions) are JSON strings (use ``json_extract``).

Read-only: a query is one or more SELECT / EXPLAIN / PRAGMA statements (DESCRIBE, SHOW, SUMMARIZE and
WITH are SELECTs); anything else (COPY, INSERT, CREATE, ATTACH, SET, INSTALL ...) is an InputError before
it runs. After the views are made the connection may open only the views' own files (DuckDB
``allowed_paths``, external access off, configuration locked), so no statement reads or writes another
path. A Parquet file DuckDB cannot read is named in the error (``kernelmill run`` heals it).

Not guaranteed: the views list the files present when ``connect`` ran; files written later are
seen by a new connection. Rows that two racing writers stored twice are seen twice here
(kernelmill.store.read_arrow removes such duplicates; SQL over raw files does not).
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from pathlib import Path

from kernelmill.errors import InputError
from kernelmill.schema import TABLES, arrow_schema
from kernelmill.store import UnreadablePartFile, check_readable


def table_files(root: Path, table: str, skipped: list | None = None) -> list[Path]:
    """The table's readable Parquet files, without in-flight temporary files (names starting with a dot);
    unreadable ones (truncated, corrupt) are left out and, with ``skipped``, appended there as one-line
    messages naming them, so every other view still works."""
    d = root / table
    out = []
    for f in sorted(f for f in d.glob("*.parquet") if not f.name.startswith(".")) if d.is_dir() else []:
        try:
            check_readable(f)
            out.append(f)
        except UnreadablePartFile as e:
            if skipped is not None:
                skipped.append(str(e))
    return out


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def connect(corpus_dir: str | os.PathLike, skipped: list | None = None):
    """An in-memory DuckDB connection with the seven named views over ``corpus_dir``, read-only (module
    docstring); unreadable Parquet files are left out of their view and named in ``skipped``."""
    import duckdb  # here: the CLI (which registers these commands) starts without loading DuckDB

    root = Path(corpus_dir)
    if not root.is_dir():
        raise InputError(f"corpus directory {root}", "does not exist")
    con = duckdb.connect()
    readable = {}
    for name, cls in TABLES.items():
        files = readable[name] = table_files(root, name, skipped)
        if files:
            lst = "[" + ", ".join(_quote(f.resolve().as_posix()) for f in files) + "]"
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet({lst}, union_by_name = true)")
        else:
            empty = arrow_schema(cls).empty_table()
            con.register(f"_empty_{name}", empty)
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM _empty_{name}")
    files = [f.resolve().as_posix() for name in TABLES for f in readable[name]]
    con.execute("SET allowed_paths = [" + ", ".join(_quote(f) for f in files) + "]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


READ_STATEMENTS = ("SELECT", "EXPLAIN", "PRAGMA")


def check_read_only(con, sql: str) -> None:
    """An InputError unless every statement of ``sql`` only reads (``READ_STATEMENTS``)."""
    import duckdb

    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as e:
        raise InputError("SQL query", str(e).strip()) from None
    for st in statements:
        kind = str(st.type).rsplit(".", 1)[-1]
        if kind not in READ_STATEMENTS:
            raise InputError("SQL query", f"{kind} statements are not allowed: `kernelmill query` is read-only "
                                          "(SELECT, EXPLAIN, DESCRIBE, SHOW, SUMMARIZE, PRAGMA)")


def resolve_corpus(corpus_dir: str | os.PathLike | None) -> Path:
    """The given directory, else the latest run started from the working directory (kernelmill.config.latest_run:
    one per working directory, so a run started elsewhere is never read by default); the directory read by
    default is named on stderr."""
    if corpus_dir:
        return Path(corpus_dir)
    from kernelmill.config import latest_run

    latest = latest_run()
    if latest is None:
        raise InputError("--corpus", f"not given, and no run was started from this directory ({Path.cwd()}); "
                         "pass --corpus DIR")
    print(f"reading {latest} (the latest run started from this directory; --corpus DIR reads another)",
          file=sys.stderr)
    return latest


def run_query(sql: str, corpus_dir: str | os.PathLike | None = None) -> tuple[list[str], list[tuple]]:
    """Run one SQL statement over the views; returns (column names, rows).

    A SQL error becomes an InputError naming the query and DuckDB's message."""
    import duckdb

    skipped: list[str] = []
    con = connect(resolve_corpus(corpus_dir), skipped)
    for line in skipped:  # one line each; the other files and views still answer
        print(f"warning: {line}", file=sys.stderr)
    try:
        check_read_only(con, sql)
        rel = con.sql(sql)
        if rel is None:  # a statement with no result
            return [], []
        return list(rel.columns), rel.fetchall()
    except duckdb.Error as e:
        raise InputError("SQL query", _name_bad_file(str(e).strip())) from None
    finally:
        con.close()


def _name_bad_file(msg: str) -> str:
    """DuckDB's message, first line only when it is about an unreadable Parquet file (it names the file)."""
    first = msg.splitlines()[0] if msg else msg
    if "parquet" in msg.lower() and ("magic" in msg.lower() or "corrupt" in msg.lower() or "invalid" in msg.lower()
                                     or "too small" in msg.lower()):
        return first + " (a truncated or corrupt Parquet file: `kernelmill run` on this directory moves it aside " \
                       "and recomputes its rows)"
    return msg


def format_rows(columns: list[str], rows: list[tuple], fmt: str = "table") -> str:
    """Rows as an aligned text table, CSV or JSON (a list of objects)."""
    if fmt == "json":
        return json.dumps([dict(zip(columns, r)) for r in rows], default=str, indent=1)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows(rows)
        return buf.getvalue().rstrip("\n")
    if fmt != "table":
        raise InputError("--format", f"unknown format {fmt!r}; use table, csv or json")
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = lambda vals: "  ".join(v.ljust(w) for v, w in zip(vals, widths)).rstrip()  # noqa: E731
    out = [line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def _cell(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:.4g}"
    s = str(v).replace("\n", "\\n")
    return s if len(s) <= 80 else s[:77] + "..."
