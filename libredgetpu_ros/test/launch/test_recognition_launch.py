"""launch_testing: launch/recognition.launch.py as a robot starts it (run by `make test` through launch_test).

The fixture extractor and a dense_256 database (saved here from the fixture photos) on the CPU twins, with
a params file of non-default values; a frame on the remapped camera topic must produce a Classification.
Broken case: an extractor model that does not exist.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # launch_test loads this file by path

from _harness import LaunchCase, launch_tests


def _photo() -> Any:
    from libredgetpu_ros.fixtures import fixtures_dir
    from libredgetpu_ros.perception.images import load_image

    return load_image(fixtures_dir() / "robotics" / "embedding" / "dog_train_0.bmp")


def _database() -> str:
    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.robotics.embedding import EmbeddingSimilarity
    from libredgetpu_ros.robotics.extractor import EmbeddingExtractor

    path = Path(tempfile.mkdtemp(prefix="libredgetpu_ros_recognition_lt_")) / "db.npz"
    with EmbeddingExtractor(backend="cpu") as extractor, MatMulEngine.from_template(256, backend="cpu") as e:
        db = EmbeddingSimilarity(e, extractor.dim)
        db.add("dog", extractor.embed(_photo()))
        db.save(path)
    return str(path)


def _camera(node: Any) -> Callable[[], None]:
    from sensor_msgs.msg import Image

    rgb = _photo()
    msg = Image(height=rgb.shape[0], width=rgb.shape[1], encoding="rgb8", step=rgb.shape[1] * 3,
                data=rgb.tobytes())
    msg.header.frame_id = "camera"
    pub = node.create_publisher(Image, "/lt/camera", 10)
    return lambda: pub.publish(msg)


def _case() -> LaunchCase:
    from vision_msgs.msg import Classification

    params = {"backend": "cpu", "template": 256, "database": _database(), "top_k": 3, "min_score": 0.2,
              "diagnostics_period": 0.5}
    return LaunchCase(
        launch_file="recognition.launch.py",
        node="/lt/recognition",
        arguments={"namespace": "lt", "image": "/lt/camera"},
        params_key="/**",
        params=params,
        expect_params={"top_k": 3, "min_score": 0.2, "template": 256},
        broken={"model": "/nonexistent/extractor_edgetpu.tflite"},
        failure_log="configure failed",
        result=(Classification, "/lt/classification"),
        stimulus=_camera,
    )


generate_test_description, TestLaunchedNode, TestShutdown = launch_tests(_case())
