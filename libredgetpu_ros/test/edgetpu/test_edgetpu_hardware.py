"""On a real accelerator: every fixture Edge TPU model against the CPU backend.

Run with: .venv/bin/python -m pytest libredgetpu_ros/test/edgetpu --run-hardware -m hardware
Tolerance: quantized outputs may differ by at most 3 LSB on at least 99 % of the elements (the Edge TPU and
LiteRT round requantization slightly differently).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

pytestmark = pytest.mark.hardware


@pytest.fixture(scope="module")
def device():
    from libredgetpu_ros.edgetpu.device import EdgeTpuDevice, list_devices

    if not list_devices():
        pytest.fail("--run-hardware given but no Edge TPU accelerator is attached")
    dev = EdgeTpuDevice.open()
    yield dev
    dev.close()


# every fixture Edge TPU model that has a CPU twin (the SSD segments have none in the fixtures)
MODELS = [
    "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite",
    "classify/mobilenet_v2_1.0_224_quant_edgetpu.tflite",
    "deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite",
    "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite",
    "matmul/dense_256_edgetpu.tflite",
    "matmul/dense_512_edgetpu.tflite",
    "matmul/dense_1024_edgetpu.tflite",
]


@pytest.mark.parametrize("relative", MODELS)
def test_model_matches_cpu(fixture_path, relative, device) -> None:
    from libredgetpu_ros.backends import open_backend
    from libredgetpu_ros.backends.edgetpu import EdgeTpuBackend

    path = fixture_path(relative)
    cpu = open_backend("cpu", path, fixture_path(relative.replace("_edgetpu", "")))
    tpu = EdgeTpuBackend()
    tpu._device = device  # share the module's open device
    tpu.load(path)
    rng = np.random.default_rng(0)
    inputs = [rng.integers(0, 256, s.shape, dtype=np.uint8).astype(s.dtype) for s in tpu.boundary.inputs]
    want = cpu.run(inputs)
    tpu.run(inputs)
    start = time.perf_counter()
    got = tpu.run(inputs)
    print(f"{path.name}: {(time.perf_counter() - start) * 1e3:.1f} ms (parameters cached)")
    for name, ref in want.items():
        diff = np.abs(got[name].astype(np.int32) - ref.astype(np.int32))
        assert np.mean(diff <= 3) >= 0.99, f"{name}: max diff {diff.max()}"
    cpu.close()
