"""launch_testing: launch/recognition.launch.py as a robot starts it (run by `make test` through launch_test).

The fixture extractor and a dense_256 database (saved here from the fixture photos) on the CPU twins, with
a params file of non-default values whose extractor model does not exist: in the good case ``model:=`` the
fixture extractor and ``database:=`` the saved database on the command line replace the file's (read back
with ``GetParameters``) and a frame on the remapped camera topic must produce a Classification; in the
broken case (no ``model:=``) configure fails.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # launch_test loads this file by path

from _harness import LaunchCase, camera, launch_tests


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
    return camera(node, _photo())


def _case() -> LaunchCase:
    from libredgetpu_ros.robotics.extractor import default_model
    from vision_msgs.msg import Classification

    model, database = str(default_model()), _database()
    params = {"model": "/nonexistent/extractor_edgetpu.tflite", "backend": "cpu", "template": 256,
              "top_k": 3, "min_score": 0.2, "diagnostics_period": 0.5}
    return LaunchCase(
        launch_file="recognition.launch.py",
        node="/lt/recognition",
        arguments={"namespace": "lt", "image": "/lt/camera"},
        params_key="/**",
        params=params,
        expect_params={"top_k": 3, "min_score": 0.2, "template": 256, "model": model, "database": database},
        broken={},
        failure_log="configure failed",
        result=(Classification, "/lt/classification"),
        stimulus=_camera,
        good_arguments={"model": model, "database": database},
    )


generate_test_description, TestLaunchedNode, TestShutdown = launch_tests(_case())
