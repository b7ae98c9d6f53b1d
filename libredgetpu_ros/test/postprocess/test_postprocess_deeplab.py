"""DeepLab CPU tail on the ASPP boundary tensors vs LiteRT running the whole CPU model (ARG_MAX output).

Two LiteRT references: the builtin kernels (what the tail replicates: bit-exact, every pixel and every logit)
and the default XNNPACK delegate (its convolutions requantize in float, so logits differ by one step in a
few percent of cells and the class map in < 0.5 % of pixels).
"""

from __future__ import annotations

import threading

import cv2
import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter, OpResolverType
from libredgetpu_ros.errors import InputError, ModelFormatError
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.postprocess import kernels
from libredgetpu_ros.postprocess.deeplab import DeepLabTail

from libredgetpu_ros import jit

COMPILED = "deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite"
TWIN = "deeplab/deeplabv3_mnv2_pascal_quant.tflite"
IMAGES = ["images/cat.bmp", "images/grace_hopper.bmp", "images/test_couple.jpg"]
MIN_AGREEMENT = 0.995  # pixels vs XNNPACK (measured 99.69 % cat, 99.88 % grace_hopper, 99.97 % test_couple)
LOGITS = "ResizeBilinear_1"  # the 33x33x21 logits before the final upsample, in the CPU twin


def _reference_runs(fixture_path, tail, **options):
    """(image, boundary tensors, ARG_MAX output, logits) per fixture image, all from one LiteRT run."""
    interpreter = Interpreter(str(fixture_path(TWIN)), experimental_preserve_all_tensors=True, **options)
    interpreter.allocate_tensors()
    index = {d["name"]: d["index"] for d in interpreter.get_tensor_details()}
    cases = []
    for image in IMAGES:
        rgb = cv2.cvtColor(cv2.imread(str(fixture_path(image))), cv2.COLOR_BGR2RGB)
        resized = cv2.resize(rgb, (513, 513))
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], resized[None])
        interpreter.invoke()
        expected = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])[0].copy()
        boundary = {name: interpreter.get_tensor(index[name]).copy() for name in tail.input_names}
        cases.append((image, boundary, expected, interpreter.get_tensor(index[LOGITS])[0].copy()))
    return cases


@pytest.fixture(scope="module")
def tail_and_reference(fixture_path):
    tail = DeepLabTail.from_model(load_model(fixture_path(COMPILED)))
    return tail, [case[:3] for case in _reference_runs(fixture_path, tail)]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_bit_exact_with_litert_builtin_kernels(tail_and_reference, fixture_path):
    """Without the XNNPACK delegate LiteRT runs the builtin kernels the tail replicates: the same class at
    every pixel (uint8 resize arithmetic, first max) and the same 22869 logits. The last convolution has no
    activation, so its negative accumulators show how LiteRT (ruy) rounds an exact half: up, not away from
    zero as gemmlowp's RoundingDivideByPOT does (that rounding put 1-2 logits per image one step off)."""
    tail, _ = tail_and_reference
    builtin = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    for image, boundary, expected, logits in _reference_runs(fixture_path, tail,
                                                             experimental_op_resolver_type=builtin):
        np.testing.assert_array_equal(tail.logits(boundary), logits, err_msg=image)
        np.testing.assert_array_equal(tail(boundary), expected, err_msg=image)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_numpy_path_equals_compiled_path(tail_and_reference, fixture_path, monkeypatch):
    """Without numba the tail takes its NumPy paths (float32 requantization with the exact band, the NumPy
    cell-wise upsample): the same logits and class maps as the compiled kernels."""
    tail, cases = tail_and_reference
    if jit.available():
        assert kernels.compiled() is not None and tail._upsample.compiled
        assert all(conv._kernel is not None for conv in tail._convs.values())
    monkeypatch.setattr(kernels, "compiled", lambda: None)
    plain = DeepLabTail.from_model(load_model(fixture_path(COMPILED)))
    assert not plain._upsample.compiled and all(conv._kernel is None for conv in plain._convs.values())
    for image, boundary, _ in cases:
        np.testing.assert_array_equal(plain.logits(boundary), tail.logits(boundary), err_msg=image)
        np.testing.assert_array_equal(plain(boundary), tail(boundary), err_msg=image)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_threads_share_one_tail(tail_and_reference):
    """Each concurrent call takes its own workspace of intermediate buffers from the tail's pool: two threads
    running one tail on different images at the same time each get their own image's class map, and results
    are new arrays (a later call leaves them)."""
    tail, cases = tail_and_reference
    expected = [tail(boundary) for _, boundary, _ in cases[:2]]
    kept = [m.copy() for m in expected]
    errors: list[str] = []

    def run(which: int) -> None:
        for _ in range(8):
            if not np.array_equal(tail(cases[which][1]), expected[which]):
                errors.append(cases[which][0])

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert 1 <= len(tail._free) <= 3  # the warm-up's workspace, plus one per call that overlapped another
    for mask, copy in zip(expected, kept, strict=True):
        np.testing.assert_array_equal(mask, copy)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_fused_upsample_argmax_equals_full_upsample(tail_and_reference):
    tail, cases = tail_and_reference
    for image, boundary, _ in cases:
        np.testing.assert_array_equal(tail(boundary), tail.reference(boundary), err_msg=image)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_class_map_agrees_with_litert(tail_and_reference):
    tail, cases = tail_and_reference
    assert [op.opcode_name for op in tail._ops] == [
        "RESIZE_BILINEAR", "QUANTIZE", "CONCATENATION", "CONV_2D", "CONV_2D", "RESIZE_BILINEAR",
        "RESIZE_BILINEAR",
        "ARG_MAX"]
    for image, boundary, expected in cases:
        mask = tail(boundary)
        assert mask.shape == (513, 513)
        agreement = float((mask == expected).mean())
        assert agreement >= MIN_AGREEMENT, (image, agreement)
        assert set(np.unique(mask)) == set(np.unique(expected)), image


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_logits_and_twin_boundary(tail_and_reference, fixture_path):
    tail, cases = tail_and_reference
    _, boundary, _ = cases[0]
    assert tail.logits(boundary).shape == (33, 33, 21)
    twin_tail = DeepLabTail.from_model(load_model(fixture_path(TWIN)), boundary_names=tail.input_names)
    np.testing.assert_array_equal(twin_tail(boundary), tail(boundary))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_bad_input(tail_and_reference, fixture_path):
    tail, cases = tail_and_reference
    _, boundary, _ = cases[0]
    with pytest.raises(InputError, match="lack tensor"):
        tail({tail.input_names[0]: boundary[tail.input_names[0]]})
    wrong = dict(boundary)
    wrong[tail.input_names[0]] = boundary[tail.input_names[0]][:, :16]
    with pytest.raises(InputError, match="shape"):
        tail(wrong)
    with pytest.raises(ModelFormatError, match="edgetpu-custom-op"):
        DeepLabTail.from_model(load_model(fixture_path(TWIN)))
    with pytest.raises(ModelFormatError, match="ARG_MAX"):
        DeepLabTail.from_model(load_model(fixture_path("classify/mobilenet_v1_0.25_128_quant.tflite")))
