"""Named device specs for roofline floor times: peak FLOP/s per dtype and memory bandwidth.

Figures are vendor datasheet peaks for dense math (no sparsity). fp32 is the CUDA-core rate:
TF32 tensor cores are not assumed, since a kernel must opt into them and that changes numerics.
fp16/bf16 are the dense tensor-core rates, the ceiling a well-written low-precision kernel can
approach. The floor time is a lower bound no kernel beats, not a prediction:

    floor_time_s = max(flops / peak_flops[dtype], bytes_moved / bandwidth)

Sources: NVIDIA H100 (SXM5 80GB) and H200 (SXM 141GB) product briefs, A100 (SXM4 80GB)
datasheet. "generic-cpu" is a 2-core desktop-class CPU (AVX2 FMA at ~3 GHz, dual-channel DDR4),
the machine kernelmill's CI runs on; use it to compare with cpu-backend timings.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelmill.errors import InputError


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    peak_flops: dict  # dtype name ("float32", "float16", "bfloat16", "float64") -> FLOP/s
    bandwidth: float  # bytes/s of main memory (HBM / DRAM)

    def peak_for(self, dtype: str) -> float:
        """Peak FLOP/s for ``dtype``; integer and unknown dtypes use the fp32 rate."""
        return self.peak_flops.get(dtype, self.peak_flops["float32"])

    def floor_time_us(self, flops: int, bytes_moved: int, dtype: str = "float32") -> float:
        """Roofline floor in microseconds: max(compute time at peak, memory time at bandwidth)."""
        return max(flops / self.peak_for(dtype), bytes_moved / self.bandwidth) * 1e6

    def as_dict(self) -> dict:
        return {"name": self.name, "peak_flops": dict(self.peak_flops), "bandwidth": self.bandwidth}


T = 1e12
DEVICES: dict[str, DeviceSpec] = {
    "H100-SXM": DeviceSpec("H100-SXM", {"float64": 34 * T, "float32": 67 * T, "float16": 989 * T,
                                        "bfloat16": 989 * T}, 3.35e12),
    "H200": DeviceSpec("H200", {"float64": 34 * T, "float32": 67 * T, "float16": 989 * T,
                                "bfloat16": 989 * T}, 4.8e12),
    "A100": DeviceSpec("A100", {"float64": 9.7 * T, "float32": 19.5 * T, "float16": 312 * T,
                                "bfloat16": 312 * T}, 2.039e12),
    "generic-cpu": DeviceSpec("generic-cpu", {"float64": 0.096 * T, "float32": 0.192 * T, "float16": 0.192 * T,
                                              "bfloat16": 0.192 * T}, 40e9),
}


def get_device(name: str) -> DeviceSpec:
    """The spec named ``name`` (case-insensitive); InputError listing the known names otherwise."""
    for key, spec in DEVICES.items():
        if key.lower() == str(name).lower():
            return spec
    raise InputError("device spec", f"unknown device {name!r}; known: {', '.join(DEVICES)}")
