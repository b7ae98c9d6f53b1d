"""One processor per camera node type: the live node (its ``PROCESSOR``) and ``process-bag`` (the registry in
``ros/bag_nodes.py``) run the same class, opened from the same parameter table, so offline results cannot
drift from live ones by a second implementation. (That the two give equal messages for the same frames is
shown per node type over DDS: test_process_bag_robotics, test_bag_replay_live, test_flow_bag_replay,
test_recognition_node.)"""

from __future__ import annotations

import pytest
from libredgetpu_ros.errors import ConfigError

CAMERA_NODE_TYPES = ["perception", "tracker", "looming", "flow", "recognition"]


def test_every_camera_node_type_is_in_the_registry() -> None:
    from libredgetpu_ros.ros.bag_nodes import OFFLINE_NODES
    from libredgetpu_ros.ros.bringup import NODE_TYPES, node_class
    from libredgetpu_ros.ros.camera import CameraNode

    camera_types = [kind for kind in NODE_TYPES if issubclass(node_class(kind), CameraNode)]
    assert camera_types == list(OFFLINE_NODES) == CAMERA_NODE_TYPES


@pytest.mark.parametrize("node_type", CAMERA_NODE_TYPES)
def test_the_live_node_and_process_bag_run_one_processor_class(node_type: str) -> None:
    from libredgetpu_ros.ros.bag_nodes import param_table, processor_class
    from libredgetpu_ros.ros.bringup import node_class
    from libredgetpu_ros.ros.camera.processor import CameraProcessor

    node = node_class(node_type)
    assert node.PROCESSOR is processor_class(node_type)
    assert issubclass(node.PROCESSOR, CameraProcessor)
    assert node.PARAMS is param_table(node_type)


def test_an_unknown_node_type_is_a_config_error_naming_the_types() -> None:
    from libredgetpu_ros.ros.bag_nodes import OFFLINE_NODES, open_offline, processor_class

    with pytest.raises(ConfigError, match="process-bag runs perception, tracker"):
        processor_class("control")
    with pytest.raises(ConfigError, match=", ".join(OFFLINE_NODES)):
        open_offline("reservoir", None)


@pytest.mark.parametrize(("node_type", "template", "extra"), [
    ("tracker", "color_red_64x64", {"module": "spot"}),
    ("tracker", "pattern_64x64_16x16_1ch", {"module": "pattern"}),
    ("looming", "looming_64x64_3x3", {}),
])
def test_cpu_threads_reach_litert(node_type: str, template: str, extra: dict) -> None:
    """The tracker and looming nodes' ``cpu_threads`` is the thread count of the template's CPU twin (it was
    declared, documented and then never passed on)."""
    from libredgetpu_ros.ros.bag_nodes import param_table, processor_class

    table = param_table(node_type)
    params = table.values_type(**{**table.defaults(), "backend": "cpu", "cpu_threads": 2,
                                  "template": template, **extra})
    processor = processor_class(node_type)(params)
    try:
        assert processor.module.runner.backend.describe()["num_threads"] == 2
    finally:
        processor.close()


@pytest.fixture
def opened_backends(monkeypatch: pytest.MonkeyPatch) -> list[list]:
    """Every backend a robotics template opens, as [backend, closed?] (the real backends, their close()
    recorded)."""
    from libredgetpu_ros.robotics import template

    real_open, seen = template._open, []

    def open_backend(*args, **kwargs):
        backend = real_open(*args, **kwargs)
        entry = [backend, False]
        seen.append(entry)
        real_close = backend.close

        def close() -> None:
            entry[1] = True
            real_close()

        backend.close = close
        return backend

    monkeypatch.setattr(template, "_open", open_backend)
    return seen


@pytest.mark.parametrize(("extra", "error"), [
    ({"module": "pattern", "template": "pattern_64x64_16x16_1ch", "template_patch": "/nonexistent/patch.png"},
     "does not exist"),
    ({"module": "pattern", "template": "pattern_64x64_16x16_1ch", "template_patch": "flat"}, "flat|texture"),
    ({"module": "spot", "template": "color_red_64x64", "color": "purple-ish"}, "parameter color"),
    ({"module": "pattern", "template": "repeated_offsets"}, "repeats offsets"),  # a sidecar not the blob's
])
def test_a_tracker_refusing_its_colour_patch_or_template_leaves_nothing_open(
        extra: dict, error: str, opened_backends: list[list], tmp_path) -> None:
    """A configure that fails on the tracker's colour, patch or template sidecar closes the tracker it opened
    (on an Edge TPU it held the device and a stream of the shared broker until the process exited)."""
    from libredgetpu_ros.errors import LibrEdgeTpuError
    from libredgetpu_ros.ros.bag_nodes import param_table, processor_class

    if extra.get("template_patch") == "flat":
        import cv2
        import numpy as np

        patch = tmp_path / "flat.png"
        cv2.imwrite(str(patch), np.full((16, 16, 3), 128, np.uint8))
        extra = {**extra, "template_patch": str(patch)}
    if extra["template"] == "repeated_offsets":
        import json
        import shutil

        from libredgetpu_ros.robotics.template import load_template

        src = load_template("pattern_64x64_16x16_1ch")
        shutil.copy(src.twin_path, tmp_path / src.twin_path.name)
        repeated = dict(src.sidecar, conv_weight_offsets=[0] * len(src.sidecar["conv_weight_offsets"]))
        (tmp_path / src.sidecar_path.name).write_text(json.dumps(repeated))
        extra = {**extra, "template": str(tmp_path / src.twin_path.name)}
    table = param_table("tracker")
    params = table.values_type(**{**table.defaults(), "backend": "cpu", **extra})
    with pytest.raises(LibrEdgeTpuError, match=error):
        processor_class("tracker")(params)
    # a pattern patch is loaded once the tracker is open; a bad colour string is refused before any open
    assert len(opened_backends) == (1 if extra["module"] == "pattern" else 0)
    assert all(closed for _, closed in opened_backends), opened_backends


@pytest.mark.parametrize("node_type", CAMERA_NODE_TYPES)
def test_every_processor_frame_takes_the_base_signature(node_type: str) -> None:
    """``CameraProcessor.messages`` (process-bag) hands ``prepared`` to every processor's ``frame`` alike
    (it branched on None because four of them had no such argument): one signature, the base's."""
    import inspect

    from libredgetpu_ros.ros.bag_nodes import processor_class
    from libredgetpu_ros.ros.camera.processor import CameraProcessor

    def shape(function) -> list[tuple[str, object, object]]:
        return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]

    assert shape(processor_class(node_type).frame) == shape(CameraProcessor.frame)
