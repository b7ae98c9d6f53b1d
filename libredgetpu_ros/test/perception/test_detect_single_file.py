"""The single-file SSD MobileNet v2 (catalogue ``ssd_mobilenet_v2_coco``) on both backends, against LiteRT
running the complete CPU model (TFLite_Detection_PostProcess included) as the oracle.

- CPU fallback: LiteRT runs the twin cut where the compiled model's Edge TPU op ends; our SSD decode + NMS
  does the rest. On real photos its detections above 0.3 must be LiteRT's: same classes, boxes within 2 px,
  scores within 0.02 (the same input tensor goes to both).
- Edge TPU: the real driver runs the compiled single-file model over the recording transport double with a
  scripted accelerator behind it (never presented as a device). The scripted device answers with the bytes an
  accelerator sends for the boundary tensors: LiteRT's boundary values placed where libedgetpu's
  ``OutputLayerInformation::Relayout`` reads them (its x-tile walk, written here from libedgetpu's algorithm,
  not with formats/layout.py, so a wrong untiling in our code cannot cancel out); the pipeline must read them
  back through the DMA schedule, untile them and decode them to LiteRT's detections. The parameters are
  uploaded once (parameter caching), not on every frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter
from libredgetpu_ros.perception.images import load_image
from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig

from ._scripted_ssd import ScriptedAccelerator

COMPILED = "ssd/mobilenet_ssd_v2_coco_quant_postprocess_edgetpu.tflite"
FULL_CPU = "ssd/mobilenet_ssd_v2_coco_quant_postprocess.tflite"
LABELS = "labels/coco_labels_edgetpu_2019.txt"
# Photos of the fixtures and what must be among the detections (class ids: 0 person, 16 cat, 17 dog, 31 tie)
PHOTOS = {"images/cat.bmp": {16}, "images/grace_hopper.bmp": {0, 31}, "images/test_couple.jpg": {0},
          "robotics/embedding/dog_train_0.bmp": {17}}
THRESHOLD = 0.3
DETECT_CONFIG = Path(__file__).resolve().parents[2] / "config" / "perception_detect.yaml"
BOX_PX, SCORE_TOL = 2.0, 0.02


@dataclass(frozen=True)
class Found:
    class_id: int
    score: float
    box: tuple[float, float, float, float]  # xmin, ymin, xmax, ymax in image pixels


def litert_full(full_cpu, tensor: np.ndarray, width: int, height: int) -> list[Found]:
    """The complete CPU model in LiteRT (its own TFLite_Detection_PostProcess), boxes in image pixels."""
    interpreter = Interpreter(model_path=str(full_cpu))
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], tensor)
    interpreter.invoke()
    # Output order of the op: boxes, classes, scores, count (the flatbuffer stores no output shapes).
    boxes, classes, scores, count = (interpreter.get_tensor(d["index"])
                                     for d in interpreter.get_output_details())
    found = []
    for i in range(int(count[0])):
        ymin, xmin, ymax, xmax = (float(v) for v in np.clip(boxes[0, i], 0.0, 1.0))
        found.append(Found(int(classes[0, i]), float(scores[0, i]),
                           (xmin * width, ymin * height, xmax * width, ymax * height)))
    return found


def above(found, threshold: float = THRESHOLD) -> list[Found]:
    return [f for f in found if f.score >= threshold]


def assert_same(ours, reference) -> None:
    ours, reference = above(ours), above(reference)
    assert [f.class_id for f in ours] == [f.class_id for f in reference]
    for a, b in zip(ours, reference, strict=True):
        assert abs(a.score - b.score) <= SCORE_TOL, (a, b)
        np.testing.assert_allclose(a.box, b.box, atol=BOX_PX)


def as_found(result) -> list[Found]:
    return [Found(d.class_id, d.score, tuple(d.box)) for d in result.detections]


@pytest.fixture(scope="module")
def cpu_pipeline(fixtures_dir):
    config = PipelineConfig(model=str(fixtures_dir / COMPILED), backend="cpu",
                            labels=str(fixtures_dir / LABELS), score_threshold=THRESHOLD)
    with PerceptionPipeline.from_config(config) as pipeline:
        yield pipeline


def test_cpu_fallback_runs_the_cut_twin_and_our_decode(cpu_pipeline) -> None:
    describe = cpu_pipeline.describe()
    assert describe["task"] == "detect" and describe["backend"] == "cpu"
    assert describe["input_size"] == [300, 300]
    (segment,) = describe["segments"]
    # the twin ends where the Edge TPU op ends: the PostProcess op is ours, not LiteRT's
    assert segment["twin_ops_dropped"] == ["TFLite_Detection_PostProcess"], segment
    assert segment["twin"].endswith(FULL_CPU.split("/")[-1])


@pytest.mark.parametrize("photo", sorted(PHOTOS))
def test_cpu_fallback_equals_litert_full_model(cpu_pipeline, fixture_path, photo) -> None:
    rgb = load_image(fixture_path(photo))
    height, width = rgb.shape[:2]
    result = cpu_pipeline.process(rgb)
    reference = litert_full(fixture_path(FULL_CPU), cpu_pipeline._transform(rgb), width, height)
    assert above(reference), f"{photo}: LiteRT found nothing above {THRESHOLD}"
    assert_same(as_found(result), reference)
    assert PHOTOS[photo] <= {d.class_id for d in result.detections}
    labels = dict(line.split(maxsplit=1) for line in fixture_path(LABELS).read_text().splitlines())
    assert all(d.label == labels[str(d.class_id)] for d in result.detections)


def _device_bytes_libedgetpu_reads(dense: np.ndarray, layer) -> bytes:
    """The output buffer that libedgetpu's ``OutputLayerInformation::Relayout`` (one execution, no shape
    info: these layers) turns into ``dense``, by inverting its walk: the x coordinates split into tiles where
    ``x_coordinate_to_linear_tile_id_map`` changes; for each y and tile, the first cell is at
    ``GetBufferIndex(y, first x, 0)`` and the next cells follow ``z_bytes_padded`` apart, the distance from
    x=0 to x=1 (from y=0 to y=1 when x_dim is 1). Padding bytes are 0."""
    lay = layer.output_layout
    assert lay is not None and not layer.slices and layer.execution_count_per_inference == 1

    def buffer_index(y: int, x: int) -> int:  # GetBufferIndex(y, x, z=0), in elements
        tile = int(lay.y_coordinate_to_linear_tile_id_map[y]) + int(lay.x_coordinate_to_linear_tile_id_map[x])
        return (int(lay.linearized_tile_byte_offset[tile])
                + int(lay.y_coordinate_to_local_y_offset[y]) * int(lay.x_coordinate_to_local_y_row_size[x])
                + int(lay.x_coordinate_to_local_byte_offset[x]))

    y_dim, x_dim, size = layer.y_dim, layer.x_dim, layer.element_size
    z_bytes = layer.z_dim * size
    cells = np.asarray(dense, np.uint8).reshape(y_dim, x_dim, z_bytes)
    step = buffer_index(0, 1) - buffer_index(0, 0) if x_dim > 1 else buffer_index(1, 0) - buffer_index(0, 0)
    z_bytes_padded = step * size
    assert z_bytes_padded >= z_bytes
    tile_ids = [int(t) for t in lay.x_coordinate_to_linear_tile_id_map[:x_dim]]
    tiles, first = [], 0
    for x in range(1, x_dim):
        if tile_ids[x] != tile_ids[first]:
            tiles.append((first, x - first))
            first = x
    tiles.append((first, x_dim - first))
    out = bytearray(layer.size_bytes)
    for y in range(y_dim):
        for first, count in tiles:
            start = buffer_index(y, first) * size
            for k in range(count):
                at = start + k * z_bytes_padded
                assert at + z_bytes <= len(out), f"{layer.name}: ({y}, {first + k}) outside the layer"
                out[at:at + z_bytes] = cells[y, first + k].tobytes()
    return bytes(out)


def _scripted_device(fixture_path, boundary: dict[str, np.ndarray]):
    """An open EdgeTpuDevice whose accelerator answers every run of the compiled model's executable with
    ``boundary`` (name -> tensor) laid out as libedgetpu reads the output layers, in DMA-hint order."""
    from libredgetpu_ros.edgetpu.device import EdgeTpuDevice
    from libredgetpu_ros.edgetpu.transport import RecordingTransport
    from libredgetpu_ros.formats import load_model

    model = load_model(fixture_path(COMPILED))
    package = model.darwinn(model.edgetpu_ops()[0])
    exe = package.execution_only
    assert package.parameter_caching is not None  # the parameters are cached on the device once
    layers = {layer.name: layer for layer in exe.output_layers}
    assert sorted(layers) == sorted(boundary)
    order = [h.layer_name for h in exe.dma_hints if h.kind == "descriptor" and h.buffer_type == "output"]
    answer = b"".join(_device_bytes_libedgetpu_reads(boundary[name], layers[name]) for name in order)
    (input_layer,) = exe.input_layers
    sim = ScriptedAccelerator({input_layer.size_bytes: answer})
    recorder: list[RecordingTransport] = []

    def transport() -> RecordingTransport:
        recorder.append(RecordingTransport(sim, bus_path="scripted-ssd-single", keep_payloads=False))
        return recorder[-1]

    return EdgeTpuDevice.open(transport_factory=transport), sim, recorder, package


def _parameter_bytes_sent(transport) -> int:
    """Bytes of the messages tagged 'parameter' (tag 2) the host wrote to the accelerator."""
    total, expect_payload = 0, 0
    for call in transport.calls:
        if call.kind != "bulk_write":
            continue
        if expect_payload:
            expect_payload -= call.length
            continue
        if call.length == 8 and call.data:
            length, tag = int.from_bytes(call.data[:4], "little"), call.data[4]
            expect_payload = length
            total += length if tag == 2 else 0
    return total


@pytest.mark.parametrize("photo", ["images/cat.bmp", "images/grace_hopper.bmp"])
def test_edgetpu_single_file_on_scripted_device_bytes(cpu_pipeline, fixture_path, photo) -> None:
    rgb = load_image(fixture_path(photo))
    height, width = rgb.shape[:2]
    tensor = cpu_pipeline._transform(rgb)
    boundary = cpu_pipeline._segments[0].backend.run([tensor])  # LiteRT's boundary values (uint8)
    device, sim, recorder, package = _scripted_device(fixture_path, boundary)
    config = PipelineConfig(model=str(fixture_path(COMPILED)), backend="edgetpu", device=device,
                            labels=str(fixture_path(LABELS)), score_threshold=THRESHOLD)
    try:
        with PerceptionPipeline.from_config(config) as pipeline:
            assert pipeline.backend_name == "edgetpu" and pipeline.task == "detect"
            first, second = pipeline.process(rgb), pipeline.process(rgb)
    finally:
        device.close()
    assert sim.frames_started == 2 and not sim.output  # two runs, every byte the device sent was read
    reference = litert_full(fixture_path(FULL_CPU), tensor, width, height)
    assert_same(as_found(first), reference)
    assert as_found(second) == as_found(first)
    # The 6.5 MB of cached parameters went to the device once, before the first run, not per frame.
    sent = sum(_parameter_bytes_sent(t) for t in recorder)
    cached = len(package.parameter_caching.parameters)
    eo = len(package.execution_only.parameters)
    assert cached > 6_000_000 and sent == cached + 2 * eo


def test_shipped_detect_config_runs_without_an_accelerator(tmp_path, fixtures_dir, fixture_path,
                                                           monkeypatch) -> None:
    """config/perception_detect.yaml after `models import` of the fixtures: the catalogue detector, auto
    backend falling back to the CPU twin (no accelerator), COCO labels by name."""
    import yaml
    from libredgetpu_ros.backends import edgetpu as edgetpu_backend
    from libredgetpu_ros.models.store import import_dir

    monkeypatch.setattr(edgetpu_backend, "edgetpu_available", lambda: False)
    monkeypatch.setenv("LIBREDGETPU_ROS_MODELS", str(tmp_path / "models"))  # a fresh, empty cache
    params = yaml.safe_load(DETECT_CONFIG.read_text())["/**"]["ros__parameters"]
    assert params["model"] == params["labels"] == "ssd_mobilenet_v2_coco" and params["backend"] == "auto"
    assert "ssd_mobilenet_v2_coco" in import_dir(fixtures_dir)
    config = PipelineConfig(model=params["model"], backend=params["backend"], task=params["task"],
                            labels=params["labels"], score_threshold=params["score_threshold"])
    with PerceptionPipeline.from_config(config) as pipeline:
        assert pipeline.backend_name == "cpu"
        assert "no Edge TPU" in pipeline.describe()["segments"][0]["fallback"]
        result = pipeline.process(load_image(fixture_path("images/cat.bmp")))
    assert [(d.class_id, d.label) for d in result.detections] == [(16, "cat")]
