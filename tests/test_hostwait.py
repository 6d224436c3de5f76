"""verifier/common/hostwait.py and its setting where no device is asked. The flag on a real device, and the CPU a
wait then costs, are tests/gpu/test_verifier_gpu.py's ``test_verifier_process_waits_for_the_device_asleep``."""

import pytest

from kernelmill.errors import InputError
from kernelmill.settings import VerifyConfig
from verifier.common import hostwait
from verifier.execute.processes import SERVER_HOST_FIELDS


def test_no_driver_is_no_flag(monkeypatch):
    monkeypatch.setattr(hostwait, "_driver", lambda: None)
    assert hostwait.block_on_waits() is False
    assert hostwait.waits_blocking() is None


def test_setting_reaches_the_servers_and_is_checked():
    assert VerifyConfig().host().host_waits == "spin"  # CUDA's default: faster hand-offs of the device (HISTORY.md)
    assert VerifyConfig(host_waits="block").host().host_waits == "block"
    assert "host_waits" in SERVER_HOST_FIELDS  # a server started under the other value is started again
    with pytest.raises(InputError, match="verify.host_waits"):
        VerifyConfig(host_waits="sometimes").check()


def test_a_childs_timing_spins_only_where_its_process_was_told_to_block(monkeypatch):
    """``held_alone``, the one spelling of a child's timing phase (the candidate's and the reference's): on cuda under
    host_waits = "block" it switches the context to spinning (``spinning``) for the phase; under "spin" (CUDA's own
    default already) and on cpu it touches nothing, not even the driver."""
    from verifier.common import childenv

    asked = []
    monkeypatch.setattr(hostwait, "_driver", lambda: asked.append(1))  # None: no driver here
    monkeypatch.setenv(childenv.HOST_WAITS, "spin")
    for backend in ("cuda", "cpu"):
        with hostwait.held_alone(backend) as changed:
            assert changed is False
    monkeypatch.setenv(childenv.HOST_WAITS, "block")
    with hostwait.held_alone("cpu") as changed:
        assert changed is False
    assert asked == []
    with hostwait.held_alone("cuda") as changed:
        assert changed is False  # asked the driver (none here: nothing to switch)
    assert asked == [1]
