"""Parquet storage for kernelmill tables: atomic, idempotent, resumable.

Layout of a run directory (and of a corpus directory, which adds README.md):

    <dir>/<table>/part-<digest>.parquet      one file per write batch

Guarantees:
- a write is atomic: rows go to a temporary file in the same folder, fsync'd, then renamed into
  place, so a reader (or a run killed mid-write) never sees half a file;
- a write is idempotent: rows whose id (the record's content-hash id field) is already stored in
  the table are dropped before writing, and the part file's name is the digest of the ids it
  holds, so re-running a stage with the same inputs adds nothing;
- reading returns each id once even if two writers raced (first file in name order wins);
- a part file that is not readable Parquet (truncated, corrupt) is an ``UnreadablePartFile`` error naming
  it in one line; ``heal`` moves such files aside (``<run>.unreadable/<table>/``, outside the corpus), after which the rows they
  held are simply missing, so a resumed stage recomputes them (every way of running stages heals the run
  directory before it starts: orchestrator.pipeline.prepare_run).

Not guaranteed: concurrent writers to one table from several machines without a shared
filesystem; that is what the flows' single writer task is for.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from kernelmill.errors import InputError
from kernelmill.schema import TABLES, arrow_schema, content_hash, from_table, record_id, to_table

PART_GLOB = "*.parquet"
ASIDE_DIR = ".unreadable"


class UnreadablePartFile(InputError):
    """A stored Parquet file that cannot be read; the message is one line naming it."""

    def __init__(self, path: Path, why: str):
        self.path = Path(path)
        super().__init__(str(path), f"not a readable Parquet file ({why}); a run started on this directory "
                                    "(`kernelmill run`, a stage command, a flow) moves it aside and recomputes "
                                    "its rows")


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no /proc: read it by setting it (and back)
    os.umask(mask)
    return mask


def usual_mode(fd: int) -> None:
    """Give a file made by ``tempfile.mkstemp`` (always 0600) the mode a newly created file gets under the
    process's umask (0644 under the usual 022), before it is renamed into place: a run directory is shared
    with other users and services (a Prefect worker, a DuckDB reader, the Hub upload) like any other files."""
    os.fchmod(fd, 0o666 & ~_umask())


def usual_dir_mode(path: str | os.PathLike) -> None:
    """The same for a folder made by ``tempfile.mkdtemp`` (0700): 0755 under the usual umask."""
    os.chmod(path, 0o777 & ~_umask())


def _why(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]


def check_readable(path: Path) -> None:
    """Raise UnreadablePartFile unless ``path``'s Parquet footer reads (cheap: the footer only)."""
    try:
        pq.read_metadata(path)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise UnreadablePartFile(path, _why(e)) from None


def unreadable_files(root: str | os.PathLike) -> list[Path]:
    """The part files of every table under ``root`` that do not read as Parquet."""
    bad = []
    for table in TABLES:
        for f in part_files(Path(root) / table):
            try:
                check_readable(f)
            except UnreadablePartFile:
                bad.append(f)
    return bad


def aside_dir(root: str | os.PathLike) -> Path:
    """Where ``heal`` keeps the unreadable files of the run or corpus directory ``root``: its sibling
    ``<root>.unreadable/``, outside the directory a user pushes to the Hub (``runs/default.unreadable/`` for
    ``runs/default``)."""
    root = Path(root).resolve()
    return root.parent / (root.name + ASIDE_DIR)


def heal(root: str | os.PathLike, aside: str | os.PathLike | None = None) -> list[tuple[Path, Path]]:
    """Move every unreadable part file under ``root`` to ``aside`` (default ``aside_dir(root)``), keeping its
    ``<table>/<file>`` path there (never deleted: kept for diagnosis, outside the corpus and invisible to every
    reader); returns (where each file was, where it went). Their rows are then missing, so the stages that wrote
    them recompute them on resume."""
    moved = []
    base = Path(root).resolve()
    target = Path(aside) if aside is not None else aside_dir(root)
    for f in unreadable_files(root):
        dest = target / Path(f).resolve().relative_to(base)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(f, dest)
        moved.append((Path(f), dest))
    return moved


def part_files(d: Path) -> list[Path]:
    """The committed Parquet files of a table folder (hidden names, such as temporary files, excluded)."""
    return sorted(f for f in d.glob(PART_GLOB) if not f.name.startswith("."))


def table_dir(root: str | os.PathLike, table: str) -> Path:
    if table not in TABLES:
        raise KeyError(f"unknown table {table!r}; known: {', '.join(TABLES)}")
    return Path(root) / table


def atomic_write_table(arrow_table, path: Path, *, row_group_size: int = 10_000) -> None:
    """Write an Arrow table to ``path`` atomically (temp file + fsync + rename), zstd compressed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # the suffix is not .parquet: no glob of a table (ours, DuckDB's, datasets') ever sees a partial file
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".parquet.partial", dir=path.parent)
    usual_mode(fd)
    os.close(fd)
    try:
        pq.write_table(arrow_table, tmp, compression="zstd", row_group_size=row_group_size)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def stored_ids(root: str | os.PathLike, table: str) -> set[str]:
    """The ids already stored in a table (reads only the id column)."""
    d = table_dir(root, table)
    id_field = TABLES[table].id_field
    ids: set[str] = set()
    for f in part_files(d):
        ids.update(_read(f, columns=[id_field]).column(id_field).to_pylist())
    return ids


def _read(f: Path, columns=None):
    try:
        return pq.read_table(f, columns=columns)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise UnreadablePartFile(f, _why(e)) from None


def write_records(root: str | os.PathLike, table: str, records: Iterable) -> int:
    """Append records not yet stored; returns how many rows were written."""
    cls = TABLES[table]
    seen = stored_ids(root, table)
    fresh, batch_ids = [], set()
    for r in records:
        if not isinstance(r, cls):
            raise TypeError(f"table {table!r} holds {cls.__name__}, got {type(r).__name__}")
        rid = record_id(r)
        if rid in seen or rid in batch_ids:
            continue
        batch_ids.add(rid)
        fresh.append(r)
    if not fresh:
        return 0
    digest = content_hash(*sorted(batch_ids))
    atomic_write_table(to_table(fresh, cls), table_dir(root, table) / f"part-{digest}.parquet")
    return len(fresh)


def read_arrow(root: str | os.PathLike, table: str):
    """The whole table as one Arrow table (empty, with the schema, when nothing is stored)."""
    cls = TABLES[table]
    schema = arrow_schema(cls)
    files = part_files(table_dir(root, table))
    if not files:
        return schema.empty_table()
    t = pa.concat_tables([_in_schema(_read(f), schema) for f in files])
    ids = t.column(cls.id_field).to_pylist()
    if len(set(ids)) != len(ids):
        first = {}
        for i, x in enumerate(ids):
            first.setdefault(x, i)
        t = t.take(pa.array(sorted(first.values())))
    return t


def _in_schema(t, schema):
    """A part file as the record's schema now is: a column of a field added since it was written (records add
    fields with defaults) is read as nulls, which come back as the field's default."""
    for name in schema.names:
        if name not in t.column_names:
            t = t.append_column(schema.field(name), pa.nulls(len(t), schema.field(name).type))
    return t.select(schema.names).cast(schema)


def read_records(root: str | os.PathLike, table: str) -> list:
    return from_table(TABLES[table], read_arrow(root, table))


def write_text_if_changed(path: str | os.PathLike, text: str) -> bool:
    """Atomic text write (temp file + rename), skipped when the content is already there; True if written."""
    path = Path(path)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        usual_mode(fd)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True
