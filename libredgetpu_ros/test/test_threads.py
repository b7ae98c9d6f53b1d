"""The package sets the numeric libraries' thread pools (threads.py): NumPy's OpenBLAS and OpenCV run the
``library_threads`` count, from the default, the environment variable, ``PipelineConfig`` and the CLI.

Each case runs in a fresh interpreter with no ``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS``: the pools a
library starts with are per process, and the test runner's own environment pins them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.threads import LIBRARY_THREADS_VAR, default_library_threads

CORES = len(os.sched_getaffinity(0))
_POOLS = """
import json, sys
import cv2, numpy
from threadpoolctl import threadpool_info

def pools():
    return {"blas": sorted({p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}),
            "opencv": cv2.getNumThreads()}

before = pools()
{action}
print(json.dumps({"before": before, "after": pools()}))
"""


def _run(action: str, **env: str) -> dict:
    base = {k: v for k, v in os.environ.items()
            if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", LIBRARY_THREADS_VAR)}
    done = subprocess.run([sys.executable, "-c", _POOLS.replace("{action}", action)],
                          env={**base, "PYTHONSAFEPATH": "1", **env}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


needs_cores = pytest.mark.skipif(CORES < 2, reason="one core: the libraries' default is one thread already")


@needs_cores
def test_default_is_one_thread_per_pool() -> None:
    out = _run("from libredgetpu_ros.threads import limit_library_threads\nlimit_library_threads()")
    assert out["before"] == {"blas": [CORES], "opencv": CORES}  # what the libraries start with
    assert out["after"] == {"blas": [1], "opencv": 1}


@needs_cores
def test_environment_variable_and_zero() -> None:
    set_two = "from libredgetpu_ros.threads import limit_library_threads\nlimit_library_threads()"
    assert _run(set_two, **{LIBRARY_THREADS_VAR: "2"})["after"] == {"blas": [2], "opencv": 2}
    assert _run(set_two, **{LIBRARY_THREADS_VAR: "0"})["after"] == {"blas": [CORES], "opencv": CORES}


@needs_cores
def test_pipeline_applies_its_setting(fixture_path) -> None:
    model = fixture_path("classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite")
    open_it = ("from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig\n"
               f"PerceptionPipeline.from_config(PipelineConfig(model={str(model)!r}, backend='cpu')).close()")
    assert _run(open_it)["after"] == {"blas": [1], "opencv": 1}
    two = open_it.replace("backend='cpu'", "backend='cpu', library_threads=2")
    assert _run(two)["after"] == {"blas": [2], "opencv": 2}


@needs_cores
def test_cli_main_applies_the_default() -> None:
    run_cli = ("from libredgetpu_ros.cli.main import main\n"
               "import contextlib, io\n"
               "with contextlib.redirect_stdout(io.StringIO()):\n"
               "    main(['devices', '--json'])")
    assert _run(run_cli)["after"] == {"blas": [1], "opencv": 1}


@pytest.mark.parametrize("text", ["x", "-1", "100000", "1.5"])
def test_bad_environment_value_is_a_config_error(text, monkeypatch) -> None:
    monkeypatch.setenv(LIBRARY_THREADS_VAR, text)
    with pytest.raises(ConfigError, match=LIBRARY_THREADS_VAR):
        default_library_threads()
