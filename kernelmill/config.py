"""One config mechanism: dataclass defaults, a TOML file, environment variables, ``--set``.

``load_settings()`` starts from the defaults written in kernelmill/settings.py, then applies, in
order: the TOML file named by ``--config`` or ``KERNELMILL_CONFIG`` (sections and keys as in
data/default.toml, which lists every default but is not read), variables named
``KERNELMILL_<SECTION>_<KEY>`` (for example ``KERNELMILL_GENERATE_MODEL=qwen``; values parsed as
TOML when they parse, else kept as strings), then ``--set SECTION.KEY=VALUE`` overrides. A key
that no section has is an error naming the key and the file or variable it came from.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from pathlib import Path
from typing import Any

from kernelmill.errors import InputError
from kernelmill.settings import SECTIONS, Settings, parse_settings

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"
DEFAULT_CONFIG = DATA_DIR / "default.toml"  # every default, for reading; the dataclasses are the source


def parse_value(raw: str) -> Any:
    """A command-line or environment value: TOML when it parses (``2``, ``true``, ``["a"]``), else the text."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def parse_sets(pairs: list[str] | None) -> dict:
    """``["mine.workers=2", "verify.trials=7"]`` -> ``{"mine.workers": 2, "verify.trials": 7}``."""
    out = {}
    for p in pairs or []:
        key, sep, raw = p.partition("=")
        if not sep or "." not in key:
            raise InputError(f"--set {p}", "expected SECTION.KEY=VALUE")
        out[key.strip()] = parse_value(raw.strip())
    return out


def read_toml(path: str | os.PathLike) -> dict:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"config file {p} does not exist")
    try:
        return tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"config file {p}", f"is not valid TOML: {e}") from None


# The verifier's switches before they were [verify] keys: read for one release, with a DeprecationWarning
# naming the key; (key, value from the variable's text).
LEGACY_ENV = {
    "KM_NO_PCH": ("pch", lambda v: not v), "KM_PCH_DIR": ("pch_dir", str),
    "KM_NO_CANONICAL_BINDING": ("canonical_binding", lambda v: v != "1"),
    "KM_SANDBOX": ("sandbox", lambda v: v.lower() not in ("0", "off", "no", "false")),
    "KM_SANDBOX_PROCS": ("sandbox_procs", int), "KM_SANDBOX_PIDS": ("sandbox_pids", int),
    "KM_BWRAP": ("bwrap", str), "KM_JOB_DIR": ("job_dir", str),
}


def _legacy_layers(env: dict) -> list[tuple[str, dict]]:
    import warnings

    layers = []
    for name, (key, parse) in LEGACY_ENV.items():
        if env.get(name):
            warnings.warn(f"environment variable {name} is deprecated and goes in the next release: set "
                          f"verify.{key} (KERNELMILL_VERIFY_{key.upper()}, [verify] {key}, --set verify.{key}=...)",
                          DeprecationWarning, stacklevel=3)
            try:
                value = parse(env[name])
            except ValueError:
                raise InputError(f"environment variable {name}", f"expected an int, got {env[name]!r}") from None
            layers.append((f"environment variable {name}", {"verify": {key: value}}))
    return layers


def env_layer(env: dict) -> list[tuple[str, dict]]:
    """One layer per ``KERNELMILL_<SECTION>_<KEY>`` variable whose SECTION is a settings section (after those of
    the deprecated KM_* names of [verify] keys, ``LEGACY_ENV``, so that the new name wins)."""
    layers = _legacy_layers(env)
    for name, raw in sorted(env.items()):
        if not name.startswith("KERNELMILL_") or name == "KERNELMILL_CONFIG":
            continue
        section, _, key = name[len("KERNELMILL_"):].lower().partition("_")
        if section in SECTIONS and key:  # KERNELMILL_HOME and the like are not settings
            layers.append((f"environment variable {name}", {section: {key: parse_value(raw)}}))
    return layers


def overrides_layer(overrides: dict | None, origin: str = "--set") -> dict:
    """``{"mine.workers": 2}`` -> ``{"mine": {"workers": 2}}``; a key that is not SECTION.KEY is an error
    naming ``origin``."""
    layer: dict[str, dict] = {}
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.partition(".")
        if not key:
            raise InputError(f"{origin} {dotted}", "expected SECTION.KEY=VALUE" if origin == "--set"
                             else 'expected a "SECTION.KEY" name')
        layer.setdefault(section, {})[key] = value
    return layer


def load_settings(path: str | os.PathLike | None = None, overrides: dict | None = None,
                  env: dict | None = None, overrides_origin: str = "--set") -> Settings:
    """The settings of a run (see the module docstring for the order of the layers). ``overrides_origin``
    is how an error names where the overrides came from: ``--set`` on the command line, a flow's parameter
    for a deployment run."""
    env = os.environ if env is None else env
    layers = []
    path = path or env.get("KERNELMILL_CONFIG")
    if path:
        layers.append((f"config file {path}", read_toml(path)))
    layers += env_layer(env)
    if overrides:
        layers.append((overrides_origin, overrides_layer(overrides, overrides_origin)))
    return parse_settings(layers)


def repo_path(p: str) -> Path:
    """A path setting: absolute as given; a relative one against the working directory when it exists
    there (what a user typed), else against the repository root (the shipped defaults, data/...)."""
    path = Path(p)
    if path.is_absolute():
        return path
    return path.resolve() if path.exists() else REPO_ROOT / path


def _state_dir() -> Path:
    return Path(os.environ.get("KERNELMILL_HOME", Path.home() / ".cache" / "kernelmill"))


def _latest_run_file(workdir: str | os.PathLike | None) -> tuple[Path, Path]:
    """(working directory, the file that names the latest run started from it)."""
    wd = Path(workdir or os.getcwd()).resolve()
    key = hashlib.sha256(str(wd).encode()).hexdigest()[:20]
    return wd, _state_dir() / "latest_runs" / key  # (latest_run, a file, was the old per-user pointer)


def record_latest_run(run_dir: str | os.PathLike, workdir: str | os.PathLike | None = None) -> None:
    """Remember ``run_dir`` as the latest run started from ``workdir`` (default: the working directory),
    the default of `kernelmill query` there. One pointer per working directory: a run started from
    another directory (another user's shell, a Prefect worker, a test) never changes it. The CLI
    records the runs a user starts; flows run by workers record nothing."""
    wd, f = _latest_run_file(workdir)
    tmp = f.with_name(f".{f.name}.{os.getpid()}.tmp")
    try:
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"workdir": str(wd), "run_dir": str(Path(run_dir).resolve())}))
        os.replace(tmp, f)
    except OSError:  # a read-only home: the run goes on, `kernelmill query` then needs --corpus
        pass


def latest_run(workdir: str | os.PathLike | None = None) -> Path | None:
    """The latest run started from ``workdir`` (default: the working directory), None when there is
    none or its directory is gone."""
    wd, f = _latest_run_file(workdir)
    try:
        rec = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    if rec.get("workdir") != str(wd):
        return None
    p = Path(rec.get("run_dir", ""))
    return p if rec.get("run_dir") and p.is_dir() else None
