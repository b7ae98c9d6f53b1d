"""``cpu_threads`` reaches LiteRT: the node parameter -> PipelineConfig -> CpuBackend -> the interpreter.

The interpreter's own worker threads are counted (``/proc/self/task``): one per thread beyond the caller's,
so 3 threads add 2 more threads to the process than 1 thread does. 0 (the node's default) means one per core
this process may use.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from libredgetpu_ros.backends.cpu import CpuBackend
from libredgetpu_ros.errors import InputError
from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig

MODEL = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"


# Counted in a fresh interpreter: in the suite's process, threads of earlier tests (executors, pools, LiteRT
# instances awaiting collection) start and end while the count runs, which once read {1: 0, 3: -9}.
_COUNT_THREADS = """
import os, sys
import numpy as np
from libredgetpu_ros.backends.cpu import CpuBackend

def threads():
    return len(os.listdir("/proc/self/task"))

model, counts = sys.argv[1], []
for n in (1, 3):
    before = threads()
    backend = CpuBackend(num_threads=n)
    backend.load(model)
    backend.run([np.zeros(s.shape, s.dtype) for s in backend.boundary.inputs])
    counts.append(threads() - before)
    assert backend.describe()["num_threads"] == n
    backend.close()
    del backend
print(*counts)
"""


def test_thread_count_reaches_the_interpreter(fixture_path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _COUNT_THREADS, str(fixture_path(MODEL))],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    one, three = (int(word) for word in done.stdout.split())
    assert three - one == 2, (one, three)
    with pytest.raises(InputError, match="num_threads must be >= 1"):
        CpuBackend(num_threads=0)


def test_pipeline_and_node_parameter(fixture_path) -> None:
    pytest.importorskip("rclpy")
    from libredgetpu_ros.ros.perception.params import ALL_CORES, PARAMS, pipeline_config

    spec = PARAMS.specs["cpu_threads"]
    assert spec.default == 0 and spec.range == (0, 64)
    assert spec.descriptor().integer_range[0].from_value == 0
    values = PARAMS.defaults() | {"model": str(fixture_path(MODEL)), "backend": "cpu"}
    default = pipeline_config(PARAMS.values_type(**values))
    assert default.cpu_threads == ALL_CORES == len(os.sched_getaffinity(0))
    assert default.library_threads == PARAMS.specs["library_threads"].default == 1  # threads.py's default
    config = pipeline_config(PARAMS.values_type(**(values | {"cpu_threads": 3, "library_threads": 2})))
    assert config.cpu_threads == 3 and config.library_threads == 2
    with PerceptionPipeline.from_config(config) as pipeline:
        assert pipeline.describe()["segments"][0]["num_threads"] == 3
    with PerceptionPipeline.from_config(PipelineConfig(model=fixture_path(MODEL), backend="cpu")) as pipeline:
        assert pipeline.describe()["segments"][0]["num_threads"] is None  # LiteRT's default
