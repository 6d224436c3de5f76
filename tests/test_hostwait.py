"""verifier/common/hostwait.py where no device is asked: the switch back to CUDA's default touches no driver. The
flag on a real device, and what it saves, are tests/gpu/test_verifier_gpu.py's ``test_verifier_process_waits_for_the_device_asleep``."""

from verifier.common import hostwait


def test_switch_leaves_the_driver_alone(monkeypatch):
    monkeypatch.setenv(hostwait.OFF, "1")

    def no_driver():
        raise AssertionError("the driver was loaded with the switch set")

    monkeypatch.setattr(hostwait, "_driver", no_driver)
    assert hostwait.block_on_waits() is False


def test_no_driver_is_no_flag(monkeypatch):
    monkeypatch.delenv(hostwait.OFF, raising=False)
    monkeypatch.setattr(hostwait, "_driver", lambda: None)
    assert hostwait.block_on_waits() is False
    assert hostwait.waits_blocking() is None
