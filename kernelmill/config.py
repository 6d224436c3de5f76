"""One config mechanism: a TOML file, overridden by environment variables, overridden by CLI flags.

``load_config()`` reads ``data/default.toml`` (shipped), then the file named by ``--config`` or
``KERNELMILL_CONFIG`` if any, merged section by section, then variables named
``KERNELMILL_<SECTION>_<KEY>`` (for example ``KERNELMILL_GENERATE_MODEL=qwen``), parsed as TOML
values when they parse, else kept as strings. Stage functions take plain keyword arguments; only
the CLI and the flows read the config, so what a stage does is visible at its call site.
"""

from __future__ import annotations

import copy
import os
import tomllib
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"
DEFAULT_CONFIG = DATA_DIR / "default.toml"


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _parse_env_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def load_config(path: str | os.PathLike | None = None, env: dict | None = None) -> dict:
    env = os.environ if env is None else env
    cfg = tomllib.loads(DEFAULT_CONFIG.read_text())
    path = path or env.get("KERNELMILL_CONFIG")
    if path:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"config file {p} does not exist")
        try:
            cfg = _merge(cfg, tomllib.loads(p.read_text()))
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"config file {p} is not valid TOML: {e}") from None
    for key, raw in env.items():
        if not key.startswith("KERNELMILL_") or key == "KERNELMILL_CONFIG":
            continue
        rest = key[len("KERNELMILL_"):].lower()
        section, _, name = rest.partition("_")
        if section in cfg and isinstance(cfg[section], dict) and name:
            cfg[section][name] = _parse_env_value(raw)
    return cfg


def apply_overrides(cfg: dict, overrides: dict | None) -> dict:
    """``{"run.nnsmith_n": 0, "verify.trials": 5}`` -> a copy of cfg with those keys set."""
    cfg = copy.deepcopy(cfg)
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.partition(".")
        if section not in cfg or not key:
            raise KeyError(f"override {dotted!r}: expected SECTION.KEY with SECTION in {sorted(cfg)}")
        cfg[section][key] = value
    return cfg


def default_backend() -> str:
    """cuda when a CUDA device is visible, else cpu."""
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:
        return "cpu"


def _state_dir() -> Path:
    return Path(os.environ.get("KERNELMILL_HOME", Path.home() / ".cache" / "kernelmill"))


def record_latest_run(run_dir: str | os.PathLike) -> None:
    """Remember a run directory as the most recent one (the default of `kernelmill query`)."""
    d = _state_dir()
    d.mkdir(parents=True, exist_ok=True)
    (d / "latest_run").write_text(str(Path(run_dir).resolve()))


def latest_run() -> Path | None:
    f = _state_dir() / "latest_run"
    if not f.is_file():
        return None
    p = Path(f.read_text().strip())
    return p if p.is_dir() else None
