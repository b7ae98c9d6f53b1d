"""DeepLab CPU tail on the ASPP boundary tensors vs LiteRT running the whole CPU model (ARG_MAX output).

Two LiteRT references: the builtin kernels (what the tail replicates: bit-exact, every pixel and every logit)
and the default XNNPACK delegate (its convolutions requantize in float, so logits differ by one step in a
few percent of cells and the class map in < 0.5 % of pixels).
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter, OpResolverType
from libredgetpu_ros.errors import InputError, ModelFormatError
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.postprocess.deeplab import DeepLabTail

COMPILED = "deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite"
TWIN = "deeplab/deeplabv3_mnv2_pascal_quant.tflite"
IMAGES = ["images/cat.bmp", "images/grace_hopper.bmp", "images/test_couple.jpg"]
MIN_AGREEMENT = 0.995  # pixels vs XNNPACK (measured 99.69 % cat, 99.88 % grace_hopper, 99.97 % test_couple)
MAX_LOGIT_MISMATCHES = 3  # of 33 * 33 * 21 values, vs LiteRT's builtin kernels
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
    """Without the XNNPACK delegate LiteRT runs the reference kernels the tail replicates: the same class at
    every pixel (uint8 resize arithmetic, first max) and the same logits but for 1-2 of 22869 values one
    step apart (measured: cat 1, grace_hopper 2, test_couple 1; the pre-change tail had the same ones)."""
    tail, _ = tail_and_reference
    builtin = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    for image, boundary, expected, logits in _reference_runs(fixture_path, tail,
                                                             experimental_op_resolver_type=builtin):
        diff = np.abs(tail.logits(boundary).astype(int) - logits)
        assert diff.max() <= 1 and np.count_nonzero(diff) <= MAX_LOGIT_MISMATCHES, (image, diff.sum())
        np.testing.assert_array_equal(tail(boundary), expected, err_msg=image)


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
