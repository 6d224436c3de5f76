"""[verify] is one section of the one settings system (issue 36): parsed by kernelmill/settings.py like every other
section, misspelt keys named with the closest key, every verifier switch a key (``KERNELMILL_VERIFY_<KEY>``, no
KM_* variable read by the verifier), and one backend resolver.

Fast: nothing here builds or verifies."""

import ast
import subprocess
import sys
import warnings

import pytest

from flows_fixtures import ROOT
from kernelmill.config import load_settings
from kernelmill.errors import InputError
from kernelmill.settings import parse_section, section_type
from verifier.common.config import VerifyConfig, resolve_backend


def test_a_misspelt_verify_key_is_named_with_its_closest_key(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text("[verify]\ntimming_trials = 7\n")
    with pytest.raises(InputError) as e:
        load_settings(cfg)
    assert str(cfg) in str(e.value) and "verify.timming_trials" in str(e.value)
    assert "did you mean timing_trials?" in str(e.value)

    cfg.write_text("[verify]\nsandbox_proc = 64\n")  # a switch that was KM_SANDBOX_PROCS
    with pytest.raises(InputError, match="did you mean sandbox_procs"):
        load_settings(cfg)
    with pytest.raises(InputError, match="KERNELMILL_VERIFY_PHC.*did you mean pch"):
        load_settings(env={"KERNELMILL_VERIFY_PHC": "false"})
    with pytest.raises(InputError, match="--set: key verify.canonical_bindings: unknown; did you mean canonical_binding"):
        load_settings(overrides={"verify.canonical_bindings": False})
    # a caller holding a plain dict goes through the same parser and gets the same message
    with pytest.raises(InputError, match="verify_cfg: key verify.trails: unknown; did you mean trials"):
        parse_section("verify", {"trails": 5}, "verify_cfg")


def test_verify_values_are_typed_and_checked_as_in_every_section():
    with pytest.raises(InputError, match="verify.sandbox_procs: expected int"):
        load_settings(overrides={"verify.sandbox_procs": "many"})
    with pytest.raises(InputError, match="verify.trials.*at least 5"):
        load_settings(overrides={"verify.trials": 3})
    with pytest.raises(InputError, match="verify.legality.*strict or partial"):
        parse_section("verify", {"legality": "lenient"}, "test")
    assert not hasattr(VerifyConfig, "from_dict")  # one parser: kernelmill.settings
    assert section_type("verify") is VerifyConfig


def test_every_former_km_switch_is_a_verify_key_set_by_the_generic_variable():
    env = {"KERNELMILL_VERIFY_PCH": "false", "KERNELMILL_VERIFY_CANONICAL_BINDING": "false",
           "KERNELMILL_VERIFY_SANDBOX": "false", "KERNELMILL_VERIFY_SANDBOX_PROCS": "64",
           "KERNELMILL_VERIFY_SANDBOX_PIDS": "256", "KERNELMILL_VERIFY_BWRAP": "/opt/bwrap",
           "KERNELMILL_VERIFY_JOB_DIR": "/tmp/jobs", "KERNELMILL_VERIFY_PCH_DIR": "/tmp/pch"}
    v = load_settings(env=env).verify
    assert (v.pch, v.canonical_binding, v.sandbox, v.sandbox_procs, v.sandbox_pids, v.bwrap, v.job_dir, v.pch_dir) \
        == (False, False, False, 64, 256, "/opt/bwrap", "/tmp/jobs", "/tmp/pch")
    host = v.host()  # what the builds, sandboxes and fork servers are given
    assert host.pch_dir == "" and not host.canonical_binding and not host.sandbox and host.sandbox_procs == 64
    assert VerifyConfig(pch=True, pch_dir="/tmp/pch").host().pch_dir == "/tmp/pch"


def test_a_deprecated_km_variable_still_works_for_one_release_and_names_its_key():
    with pytest.warns(DeprecationWarning, match="KM_NO_PCH is deprecated.*verify.pch.*KERNELMILL_VERIFY_PCH"):
        v = load_settings(env={"KM_NO_PCH": "1", "KM_SANDBOX_PROCS": "64"}).verify
    assert v.pch is False and v.sandbox_procs == 64
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        both = load_settings(env={"KM_SANDBOX": "off", "KERNELMILL_VERIFY_SANDBOX": "true"}).verify
        assert both.sandbox is True  # the new name wins
        with pytest.raises(InputError, match="KM_SANDBOX_PIDS"):
            load_settings(env={"KM_SANDBOX_PIDS": "lots"})


def _project_files():
    for pkg in ("kernelmill", "synth", "graphs", "curation", "verifier", "train", "orchestrator", "flows", "bench"):
        yield from (ROOT / pkg).rglob("*.py")


def test_the_verifier_reads_no_km_variable_and_one_function_resolves_a_backend():
    """No module of the verifier names a KM_* variable (its children's markers are verifier/common/childenv.py's
    ``_KM_*``); resolve_backend in verifier/common/config.py is the only backend resolver of the project."""
    resolvers = []
    for path in _project_files():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name in ("resolve_backend", "pick_device", "default_backend"):
                resolvers.append(f"{path.relative_to(ROOT)}:{node.name}")
            if path.parent.name == "verifier" and isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not node.value.startswith("KM_"), f"{path.name} names {node.value}"
    assert resolvers == ["verifier/common/config.py:resolve_backend"]
    assert resolve_backend("cpu") == "cpu" and resolve_backend("auto") in ("cpu", "cuda")
    with pytest.raises(InputError, match="train.device"):  # a trainer's device may name a GPU, which must exist
        resolve_backend("cuda:64", "train.device", device_index=True)
    with pytest.raises(InputError, match="run.backend"):  # a verifier backend names no index
        resolve_backend("cuda:0", "run.backend")
    with pytest.raises(InputError, match="run.backend.*unknown backend 'gpu'"):
        resolve_backend("gpu", "run.backend")


def test_the_settings_layer_stays_torch_free():
    """kernelmill/settings.py imports VerifyConfig directly (no lazy verifier.engine import): that costs no torch."""
    code = "import sys, kernelmill.settings as s; s.Settings(); assert 'torch' not in sys.modules, 'torch imported'"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
