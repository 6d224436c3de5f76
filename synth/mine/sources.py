"""Where mined code comes from: a local directory tree, a git repository, or a Hugging Face dataset.

``iter_repos(source)`` yields :class:`RepoFiles` groups, one per repository (for a dataset, one per
row, since rows of one repository need not be adjacent in a stream). Each file carries its raw bytes
and its provenance (repo, path, commit, license); decoding and the checks for binary, non-UTF-8 and
huge files are :func:`decode_source_file`'s job, so a bad file is counted and skipped, never fatal.

SOURCE forms:
    a directory            every ``*.py`` below it; a folder holding LICENSE/COPYING (or .git) starts
                           a repository, named after the folder; files above any such folder belong
                           to a repository named after the root
    a git work tree path   the files git tracks, commit from ``git rev-parse HEAD``
    a git URL              ``git clone --depth 1`` into a temporary folder (needs the network; without
                           it an InputError names the URL)
    hf:NAME[:COLUMN]       a dataset, streamed; NAME may be a hub name, a folder saved with
                           ``save_to_disk``, a folder of Parquet/JSON files, or one such file

Not done: submodules, LFS files, and licenses other than the common SPDX families below (their
text is reported as "other").
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from kernelmill.errors import InputError

LICENSE_FILES = ("LICENSE", "LICENSE.txt", "LICENSE.md", "LICENCE", "COPYING", "COPYING.txt")
CONTENT_COLUMNS = ("content", "code", "text", "source", "func_code_string")
REPO_COLUMNS = ("repo_name", "max_stars_repo_name", "repository", "repo")
PATH_COLUMNS = ("path", "max_stars_repo_path", "file_path", "filepath")
LICENSE_COLUMNS = ("license", "licenses", "max_stars_repo_licenses")
COMMIT_COLUMNS = ("commit", "max_stars_repo_head_hexsha", "revision")
_SPDX_RE = re.compile(rb"SPDX-License-Identifier:\s*([A-Za-z0-9.+-]+)")
_URL_RE = re.compile(r"^(https?|git|ssh|file)://|^git@[^:]+:")


@dataclass
class SourceFile:
    """One file as found: raw bytes (None when it was too large to read) and its provenance."""
    repo: str
    path: str
    commit: str = ""
    license: str = "unknown"
    data: bytes | None = None
    size: int = 0


@dataclass
class RepoFiles:
    repo: str
    commit: str = ""
    license: str = "unknown"
    files: list[SourceFile] = field(default_factory=list)


class SkippedFile(Exception):
    """A file that cannot be mined; ``reason`` is a short counter name (binary, non_utf8, too_large)."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


# ---------------------------------------------------------------------------- licenses


def license_from_text(text: str) -> str:
    """An SPDX-style id (lower case) for a LICENSE file's text; "other" when not recognised."""
    t = text[:20000]
    low = t.lower()
    if "permission is hereby granted, free of charge" in low or re.search(r"\bmit license\b", low):
        return "mit"
    if "apache license" in low and "2.0" in low:
        return "apache-2.0"
    if "gnu lesser general public license" in low:
        return "lgpl-3.0" if "version 3" in low else "lgpl-2.1"
    if "gnu affero general public license" in low:
        return "agpl-3.0"
    if "gnu general public license" in low:
        return "gpl-3.0" if "version 3" in low else "gpl-2.0"
    if "mozilla public license" in low:
        return "mpl-2.0"
    if "redistribution and use in source and binary forms" in low:
        return "bsd-3-clause" if ("neither the name" in low or "contributors may be used" in low) else "bsd-2-clause"
    if "unlicense" in low or "this is free and unencumbered software" in low:
        return "unlicense"
    return "other"


def license_of_dir(d: Path) -> str | None:
    for name in LICENSE_FILES:
        f = d / name
        if f.is_file():
            return license_from_text(f.read_bytes()[:20000].decode("utf-8", "replace"))
    return None


def spdx_of_file(data: bytes) -> str | None:
    """The SPDX id a file declares in its first lines, lower case, if any."""
    m = _SPDX_RE.search(data[:2000])
    return m.group(1).decode("ascii", "replace").lower() if m else None


def decode_source_file(f: SourceFile, *, max_file_bytes: int) -> str:
    """The file's text; raises SkippedFile("too_large" | "binary" | "non_utf8")."""
    if f.data is None or f.size > max_file_bytes or len(f.data) > max_file_bytes:
        raise SkippedFile("too_large")
    if b"\x00" in f.data[:8192]:
        raise SkippedFile("binary")
    try:
        return f.data.decode("utf-8")
    except UnicodeDecodeError:
        raise SkippedFile("non_utf8") from None


# ---------------------------------------------------------------------------- directories and git


def _read(path: Path, max_file_bytes: int) -> tuple[bytes | None, int]:
    size = path.stat().st_size
    return (None if size > max_file_bytes else path.read_bytes()), size


def _git(args: list[str], cwd: Path | str, timeout: float = 60) -> str:
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip() or f"git {' '.join(args)} failed")
    return r.stdout


def iter_dir_repos(root: Path, *, max_file_bytes: int) -> Iterator[RepoFiles]:
    """Repositories under a plain directory (see module docstring), files sorted by path."""
    root = root.resolve()
    files = sorted(p for p in root.rglob("*.py") if p.is_file() and ".git" not in p.parts)
    groups: dict[Path, list[Path]] = {}
    repo_roots: dict[Path, bool] = {}

    def repo_root_of(p: Path) -> Path:
        d = p.parent
        while True:
            if d not in repo_roots:
                repo_roots[d] = license_of_dir(d) is not None or (d / ".git").exists()
            if repo_roots[d] or d == root:
                return d
            d = d.parent

    for p in files:
        groups.setdefault(repo_root_of(p), []).append(p)
    for rroot, paths in sorted(groups.items()):
        lic = license_of_dir(rroot) or "unknown"
        name = rroot.name
        group = RepoFiles(repo=name, license=lic)
        for p in paths:
            data, size = _read(p, max_file_bytes)
            group.files.append(SourceFile(repo=name, path=p.relative_to(rroot).as_posix(),
                                          license=(data and spdx_of_file(data)) or lic, data=data, size=size))
        yield group


def iter_git_repo(path: Path, *, max_file_bytes: int, repo_name: str | None = None) -> Iterator[RepoFiles]:
    """The tracked ``*.py`` files of a git work tree at its HEAD commit."""
    top = Path(_git(["rev-parse", "--show-toplevel"], path).strip())
    commit = _git(["rev-parse", "HEAD"], top).strip()
    if repo_name is None:
        try:
            url = _git(["config", "--get", "remote.origin.url"], top).strip()
            repo_name = repo_from_url(url)
        except RuntimeError:
            repo_name = top.name
    lic = license_of_dir(top) or "unknown"
    group = RepoFiles(repo=repo_name, commit=commit, license=lic)
    for rel in sorted(_git(["ls-files", "-z", "--", "*.py"], top).split("\0")):
        if not rel:
            continue
        p = top / rel
        if not p.is_file():
            continue
        data, size = _read(p, max_file_bytes)
        group.files.append(SourceFile(repo=repo_name, path=rel, commit=commit, license=(data and spdx_of_file(data)) or lic,
                                      data=data, size=size))
    yield group


def repo_from_url(url: str) -> str:
    """owner/name from a git URL (https://host/owner/name(.git), git@host:owner/name.git)."""
    u = re.sub(r"\.git/?$", "", url.strip().rstrip("/"))
    u = re.sub(r"^git@[^:]+:", "", u)
    parts = [p for p in re.split(r"[/:]", u) if p]
    return "/".join(parts[-2:]) if len(parts) >= 2 else (parts[-1] if parts else url)


def clone_url(url: str, dest: Path, timeout: float = 300) -> None:
    """``git clone --depth 1``; raises InputError naming the URL when cloning fails (no network, ...)."""
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")
    try:
        r = subprocess.run(["git", "clone", "--depth", "1", "--quiet", url, str(dest)], capture_output=True,
                           text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise InputError(url, f"git clone timed out after {timeout:.0f}s (is the network reachable?)") from None
    if r.returncode != 0:
        raise InputError(url, "git clone failed (is the network reachable?): " + (r.stderr.strip()[-400:] or "no output"))


# ---------------------------------------------------------------------------- Hugging Face datasets


def parse_hf_source(source: str) -> tuple[str, str | None]:
    """``hf:NAME[:COLUMN]`` -> (NAME, COLUMN or None). A local path may itself hold ':' only on Windows."""
    rest = source[3:]
    name, column = rest, None
    if ":" in rest:
        head, _, tail = rest.rpartition(":")
        if head and "/" not in tail and not Path(rest).exists():
            name, column = head, tail
    if not name:
        raise InputError(source, "hf: source needs a dataset name or path, e.g. hf:codeparrot/github-code")
    return name, column


def _open_hf(name: str):
    import datasets  # slow to import (about 2 s, torch with it): only hf: sources need it

    p = Path(name)
    if p.is_dir() and any((p / n).exists() for n in ("dataset_info.json", "state.json", "dataset_dict.json")):
        ds = datasets.load_from_disk(str(p))
        if isinstance(ds, datasets.DatasetDict):
            ds = ds["train"] if "train" in ds else ds[next(iter(ds))]
        return ds
    if p.is_dir() or p.is_file():
        files = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.suffix in (".parquet", ".jsonl", ".json", ".csv"))
        if not files:
            raise InputError(name, "folder holds no saved dataset and no .parquet/.jsonl/.json/.csv files")
        kind = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}[files[0].suffix]
        return datasets.load_dataset(kind, data_files=[str(f) for f in files], split="train", streaming=True)
    try:
        return datasets.load_dataset(name, split="train", streaming=True)
    except Exception as e:  # the hub is unreachable, or no such dataset
        raise InputError(f"hf:{name}", f"cannot load dataset ({type(e).__name__}: {str(e)[:300]})") from None


def _first(row: dict, names: tuple[str, ...]):
    for n in names:
        if n in row and row[n] not in (None, ""):
            return row[n]
    return None


def iter_hf_repos(source: str, *, max_file_bytes: int, limit: int | None = None) -> Iterator[RepoFiles]:
    """One RepoFiles per dataset row holding the content column (given, or the first of CONTENT_COLUMNS)."""
    name, column = parse_hf_source(source)
    ds = _open_hf(name)
    for i, row in enumerate(ds):
        if limit is not None and i >= limit:
            break
        col = column or next((c for c in CONTENT_COLUMNS if c in row), None)
        if col is None or col not in row:
            raise InputError(source, f"no content column {column or '/'.join(CONTENT_COLUMNS)} in the dataset "
                                     f"(columns: {', '.join(row)})")
        content = row[col]
        data = content.encode("utf-8", "surrogatepass") if isinstance(content, str) else bytes(content or b"")
        repo = str(_first(row, REPO_COLUMNS) or Path(name).name or name)
        path = str(_first(row, PATH_COLUMNS) or f"row{i}.py")
        lic = _first(row, LICENSE_COLUMNS)
        if isinstance(lic, (list, tuple)):
            lic = lic[0] if lic else None
        lic = str(lic).lower() if lic else (spdx_of_file(data) or "unknown")
        commit = str(_first(row, COMMIT_COLUMNS) or "")
        size = len(data)
        f = SourceFile(repo=repo, path=path, commit=commit, license=lic,
                       data=None if size > max_file_bytes else data, size=size)
        yield RepoFiles(repo=repo, commit=commit, license=lic, files=[f])


# ---------------------------------------------------------------------------- dispatch


def source_kind(source: str) -> str:
    """"hf", "git_url", "git", "dir" or "file"; raises InputError when SOURCE is none of them."""
    if source.startswith("hf:"):
        return "hf"
    if _URL_RE.match(source) or (source.endswith(".git") and not Path(source).exists()):
        return "git_url"
    p = Path(source)
    if p.is_dir():
        return "git" if (p / ".git").exists() else "dir"
    if p.is_file() and p.suffix == ".py":
        return "file"
    raise InputError(source, "not a directory, a .py file, a git URL, or hf:NAME")


def iter_repos(source: str, *, max_file_bytes: int = 1 << 20) -> Iterator[RepoFiles]:
    """Every repository group of SOURCE (see module docstring). A cloned URL is removed afterwards."""
    kind = source_kind(source)
    if kind == "hf":
        yield from iter_hf_repos(source, max_file_bytes=max_file_bytes)
    elif kind == "git_url":
        tmp = Path(tempfile.mkdtemp(prefix="kernelmill-clone-"))
        try:
            clone_url(source, tmp / "repo")
            yield from iter_git_repo(tmp / "repo", max_file_bytes=max_file_bytes, repo_name=repo_from_url(source))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    elif kind == "git":
        yield from iter_git_repo(Path(source), max_file_bytes=max_file_bytes)
    elif kind == "file":
        p = Path(source).resolve()
        lic = license_of_dir(p.parent) or "unknown"
        data, size = _read(p, max_file_bytes)
        yield RepoFiles(repo=p.parent.name, license=lic,
                        files=[SourceFile(repo=p.parent.name, path=p.name, license=lic, data=data, size=size)])
    else:
        yield from iter_dir_repos(Path(source), max_file_bytes=max_file_bytes)
