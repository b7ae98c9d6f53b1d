"""The CPU backend returns exactly the Edge TPU op's output tensors, computed by LiteRT on the CPU twin.

References: LiteRT running the uncompiled model in full (every intermediate tensor preserved), and for
PoseNet, whose full twin ends in a custom op LiteRT cannot run, the decoder-less model Google exported.
"""

from __future__ import annotations

import os
import types
from contextlib import closing

import cv2
import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter
from libredgetpu_ros.backends import open_backend
from libredgetpu_ros.backends.base import BoundaryInfo
from libredgetpu_ros.backends.cpu import CpuBackend
from libredgetpu_ros.backends.twin import cut_twin
from libredgetpu_ros.errors import (
    BackendError,
    ConfigError,
    DeviceNotFoundError,
    InputError,
    ModelFormatError,
)
from libredgetpu_ros.formats import load_model

POSENET = "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite"
DEEPLAB = "deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite"
MNV1 = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"
MNV2 = "classify/mobilenet_v2_1.0_224_quant_edgetpu.tflite"


def _random_input(backend: CpuBackend, seed: int) -> np.ndarray:
    spec = backend.boundary.inputs[0]
    return np.random.default_rng(seed).integers(0, 256, spec.shape, dtype=np.uint8)


@pytest.fixture(scope="module")
def backends(fixtures_dir):
    opened = {}
    for name in (POSENET, DEEPLAB, MNV1, MNV2):
        backend = CpuBackend()
        backend.load(fixtures_dir / name)
        opened[name] = backend
    yield opened
    for backend in opened.values():
        backend.close()


@pytest.mark.parametrize("name", [POSENET, DEEPLAB, MNV1, MNV2])
def test_outputs_are_the_edgetpu_op_outputs(backends, fixture_path, name):
    compiled = load_model(fixture_path(name))
    op = compiled.edgetpu_ops()[0]
    expected = {compiled.tensors[i].name: compiled.tensors[i] for i in op.outputs}
    out = backends[name].run([_random_input(backends[name], 0)])
    assert list(out) == list(expected)  # same names, same order
    for key, array in out.items():
        assert array.shape == tuple(expected[key].shape)
        assert array.dtype == expected[key].dtype


@pytest.mark.parametrize("name", [DEEPLAB, MNV1, MNV2])
def test_cut_twin_bit_exact_with_full_twin(backends, name):
    backend = backends[name]
    full = Interpreter(model_path=str(backend.twin.path), experimental_preserve_all_tensors=True)
    full.allocate_tensors()
    by_name = {t["name"]: t["index"] for t in full.get_tensor_details()}
    for seed in (1, 2):
        x = _random_input(backend, seed)
        out = backend.run([x])
        full.set_tensor(full.get_input_details()[0]["index"], x)
        full.invoke()
        for key, array in out.items():
            np.testing.assert_array_equal(array, full.get_tensor(by_name[key]), err_msg=key)


def test_posenet_cut_matches_google_decoderless_model(backends, fixture_path):
    """Google's export requantizes heatmaps and short offsets (other scales) and keeps mid offsets as is."""
    backend = backends[POSENET]
    ref = Interpreter(model_path=str(fixture_path("posenet/posenet_mobilenet_v1_075_481_641_quant.tflite")))
    ref.allocate_tensors()
    ref_outputs = {d["name"]: d for d in ref.get_output_details()}
    image = cv2.imread(str(fixture_path("images/test_couple.jpg")))[:, :, ::-1]
    x = cv2.resize(image, (641, 481), interpolation=cv2.INTER_NEAREST_EXACT)[None]
    out = backend.run([x])
    ref.set_tensor(ref.get_input_details()[0]["index"], x)
    ref.invoke()
    # Same order as the boundary: heatmaps, short offsets, mid offsets.
    names = ("float_heatmaps", "float_short_offsets", "float_mid_offsets")
    for ref_name, spec in zip(names, backend.boundary.outputs, strict=True):
        detail = ref_outputs[ref_name]
        ref_scale, ref_zero = detail["quantization"]
        theirs = (ref.get_tensor(detail["index"]).astype(np.float32) - ref_zero) * ref_scale
        ours = spec.dequantize(out[spec.name])
        if (ref_scale, ref_zero) == (pytest.approx(spec.scale), spec.zero_point):
            np.testing.assert_array_equal(out[spec.name], ref.get_tensor(detail["index"]), err_msg=ref_name)
        # Requantizing rounds to the nearest step of each scale: at most half a step of each apart, where
        # neither side is clipped to its uint8 range (the two exports cover different real ranges).
        raw_ref = ref.get_tensor(detail["index"])
        unclipped = (out[spec.name] % 255 != 0) & (raw_ref % 255 != 0)
        assert unclipped.mean() > 0.05, ref_name
        tolerance = 0.5 * (ref_scale + spec.scale) * 1.001
        assert np.abs(ours - theirs)[unclipped].max() <= tolerance, ref_name


def test_twin_cut_drops_exactly_the_cpu_tail(backends):
    assert backends[POSENET].twin.dropped_ops == ("PosenetDecoderOp",)
    assert sorted(backends[DEEPLAB].twin.dropped_ops) == sorted(
        ["RESIZE_BILINEAR", "QUANTIZE", "CONCATENATION", "CONV_2D", "CONV_2D", "RESIZE_BILINEAR",
         "RESIZE_BILINEAR", "ARG_MAX"])
    assert backends[MNV2].twin.dropped_ops == ()


def test_twin_of_another_model_is_rejected(fixture_path):
    boundary = BoundaryInfo.from_model(load_model(fixture_path(MNV1)), fixture_path(MNV1))
    with pytest.raises(ModelFormatError, match="no tensor named"):
        cut_twin(boundary, fixture_path("deeplab/deeplabv3_mnv2_pascal_quant.tflite"))


def test_missing_twin_is_an_input_error(fixture_path, tmp_path):
    lonely = tmp_path / "mobilenet_v1_0.25_128_quant_edgetpu.tflite"
    os.symlink(fixture_path(MNV1), lonely)
    backend = CpuBackend()
    with pytest.raises(InputError, match=r"CPU twin .* not found"):
        backend.load(lonely)
    with pytest.raises(InputError, match="does not exist"):
        backend.load(lonely, tmp_path / "nope.tflite")


def test_bad_inputs_are_rejected_and_backend_survives(backends):
    backend = backends[MNV1]
    good = _random_input(backend, 4)
    with pytest.raises(InputError, match="dtype"):
        backend.run([good.astype(np.int8)])
    with pytest.raises(InputError, match="expected 1 input"):
        backend.run([good, good])
    with pytest.raises(InputError, match="shape"):
        backend.run([good[:, :64]])
    np.testing.assert_array_equal(backend.run([good[0]])[backend.boundary.output_names[0]],
                                  backend.run([good])[backend.boundary.output_names[0]])
    # an input at the exact shape and dtype (the frame path: set as given) answers as the general path
    # does, read-only or not contiguous
    read_only = good.copy()
    read_only.flags.writeable = False
    strided = np.ascontiguousarray(good[:, :, ::-1])[:, :, ::-1]
    for array in (read_only, strided):
        got = backend.run((array,))
        assert set(got) == set(backend.boundary.output_names)
        np.testing.assert_array_equal(got[backend.boundary.output_names[0]],
                                      backend.run([good[0]])[backend.boundary.output_names[0]])


def test_run_without_model_is_a_backend_error():
    with pytest.raises(BackendError):
        CpuBackend().run([np.zeros((1, 2, 2, 3), np.uint8)])


def test_open_backend_selection(fixture_path, monkeypatch, caplog):
    import libredgetpu_ros.backends as backends_pkg

    with pytest.raises(ConfigError):
        open_backend("gpu", fixture_path(MNV1))
    with closing(open_backend("cpu", fixture_path(MNV1))) as backend:
        assert backend.name == "cpu"
        assert (backend.choice, backend.fallback) == ("cpu (requested)", "")  # asked for: no fallback

    absent = types.SimpleNamespace(edgetpu_available=lambda: False)
    monkeypatch.setattr(backends_pkg, "_edgetpu_module", lambda: absent)
    caplog.set_level("INFO")
    with closing(open_backend("auto", fixture_path(MNV1))) as backend:
        assert backend.name == "cpu"
        assert backend.fallback == backend.choice and backend.choice.startswith("auto: no Edge TPU attached")
        assert backend.describe()["fallback"] == backend.fallback
    assert "no Edge TPU attached" in caplog.text

    class Failing:
        name = "edgetpu"

        def __init__(self, device=None, rate_hz=0.0, stream=""):
            pass

        def load(self, model_path, cpu_model_path=None):
            raise DeviceNotFoundError("unplugged")

        def close(self):
            pass

    broken = types.SimpleNamespace(edgetpu_available=lambda: True, EdgeTpuBackend=Failing)
    monkeypatch.setattr(backends_pkg, "_edgetpu_module", lambda: broken)
    with closing(open_backend("auto", fixture_path(MNV1))) as backend:
        assert backend.name == "cpu"
        assert backend.fallback == "auto: the Edge TPU failed to open: unplugged"
    assert "failed to open: unplugged" in caplog.text
    with pytest.raises(DeviceNotFoundError):
        open_backend("edgetpu", fixture_path(MNV1))

