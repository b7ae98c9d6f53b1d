"""MatMul runners come from a registry the families fill; matmul/ never imports another family's folder."""

from __future__ import annotations

import ast
import contextlib
import subprocess
import threading
from pathlib import Path

import libredgetpu_ros.matmul
import numpy as np
import pytest
from libredgetpu_ros.errors import ConfigError, WeightsError
from libredgetpu_ros.matmul import MatMulEngine, runners
from libredgetpu_ros.matmul.twin import dense_uint8

from .._helpers import PYTHON

MATMUL_DIR = Path(libredgetpu_ros.matmul.__file__).resolve().parent
FAMILIES = ("sophgo", "femto", "ingenic", "teamtensor")


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_matmul_sources_import_no_other_family():
    # Lazy imports inside functions count too: that is how the old sophgo import closed the cycle.
    offenders = {path.name: sorted(name for name in _imported_modules(path)
                                   if any(name.startswith(f"libredgetpu_ros.{f}") for f in FAMILIES))
                 for path in MATMUL_DIR.glob("*.py")}
    assert {name: mods for name, mods in offenders.items() if mods} == {}


def test_tpulang_engine_loads_no_sophgo_until_asked():
    probe = ("import sys, numpy as np\n"
             "from libredgetpu_ros.matmul import MatMulEngine\n"
             "e = MatMulEngine.from_template(256, backend='cpu'); e.matmul(np.zeros(256))\n"
             "assert not [m for m in sys.modules if m.startswith('libredgetpu_ros.sophgo')]\n"
             "t = MatMulEngine.from_template(256, backend='tpulang')\n"
             "print(type(t._runner).__module__)\n")
    proc = subprocess.run([*PYTHON, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "libredgetpu_ros.sophgo.matmul_runner"


def test_known_names_and_unknown_name_error():
    assert {"cpu", "edgetpu", "tpulang"} <= set(runners.runner_names())
    with pytest.raises(ConfigError, match=r"'nonesuch' is unknown; known: 'auto', 'cpu', 'edgetpu'"):
        MatMulEngine.from_template(256, backend="nonesuch")
    with pytest.raises(ConfigError, match="reserved"):
        runners.register_runner("auto", lambda template, device: None)


class _RecordingRunner:
    """A test double of a family's runner: the twin's arithmetic on the int8 weights of each staged set."""

    def __init__(self, template, device):
        from libredgetpu_ros.matmul.blob import parse_blob

        self.template, self.device, self.staged, self.closed = template, device, [], False
        self._parse = parse_blob

    def stage(self, parameters):
        self.staged.append(parameters.version)

    def run(self, xq, parameters):
        weights, _ = self._parse(parameters.blob("pc"), self.template.rows, self.template.cols)
        return dense_uint8(weights, xq, self.template.quant)

    def close(self):
        self.closed = True


def test_registered_runner_is_used_with_its_device_and_versions(monkeypatch):
    # The registry is process-wide: a copy for this test, so later tests (the control node's backend
    # choices come from it) do not see "recording-test".
    monkeypatch.setattr(runners, "_factories", dict(runners._factories))
    runners.register_runner("recording-test", _RecordingRunner)
    rng = np.random.default_rng(0)
    with MatMulEngine.from_template(256, backend="cpu") as twin, \
            MatMulEngine.from_template(256, backend="recording-test", device="dev0") as engine:
        runner = engine._runner
        assert isinstance(runner, _RecordingRunner) and runner.device == "dev0" and runner.staged == [0]
        assert (engine.backend, engine.choice, engine.fallback) == ("recording-test",
                                                                    "recording-test (requested)", "")
        weights = rng.uniform(-50, 50, (256, 256)) * engine.quantization.weight_scales[:, None]
        engine.set_weights(weights)
        twin.set_weights(weights)
        engine.set_weights(weights, dry_run=True)  # a dry run stages nothing
        assert runner.staged == [0, 1]
        x = rng.uniform(-1, 1, (3, 256))
        assert np.array_equal(engine.matmul(x), twin.matmul(x))
    assert runner.closed


def test_a_guard_is_entered_around_the_staging_alone(monkeypatch):
    """``set_weights(guard=...)`` (the control node's step lock, ``ros/control/node.py``): held while the
    runner stages, free while the weights are validated and quantized (the blob built); not entered for a
    dry run or refused weights; what it raises is raised, nothing staged or published. The integer twin
    stages nothing (``stages_weights`` false): its callers need no lock."""
    from libredgetpu_ros.matmul import engine as engine_module

    monkeypatch.setattr(runners, "_factories", dict(runners._factories))
    runners.register_runner("recording-test", _RecordingRunner)
    lock, seen = threading.Lock(), []

    def recording(kind, function):
        def wrapper(*args, **kwargs):
            seen.append((kind, lock.locked()))
            return function(*args, **kwargs)
        return wrapper

    class Busy(Exception):
        pass

    @contextlib.contextmanager
    def refusing():
        seen.append(("guard", None))
        raise Busy("a call in flight")
        yield  # a context manager's shape

    for name in ("quantize_to_blob", "quantize_rows"):  # the compiled pass (blob included) or NumPy's
        monkeypatch.setattr(engine_module, name, recording("quantize", getattr(engine_module, name)))
    with MatMulEngine.from_template(256, backend="cpu") as twin, \
            MatMulEngine.from_template(256, backend="recording-test") as engine:
        assert engine.stages_weights and not twin.stages_weights
        runner = engine._runner
        monkeypatch.setattr(runner, "stage", recording("stage", runner.stage))
        weights = np.full((256, 256), 0.5) * engine.quantization.weight_scales[:, None]
        seen.clear()
        engine.set_weights(weights, guard=lock)
        assert seen[-1] == ("stage", True) and seen[:-1] and all(k == "quantize" and not held
                                                                 for k, held in seen[:-1]), seen
        version, staged = engine.version, list(runner.staged)
        seen.clear()
        engine.set_weights(weights, dry_run=True, guard=refusing())
        with pytest.raises(WeightsError):
            engine.set_weights(np.full((256, 256), np.nan), guard=refusing())
        assert ("guard", None) not in seen
        with pytest.raises(Busy):
            engine.set_weights(weights * 0.5, guard=refusing())
        assert engine.version == version and runner.staged == staged and ("stage", True) not in seen


class _UploadRunner:
    """A runner of the old vocabulary (upload(blob, version) / run(blob, version, xq)): no stage()."""

    def __init__(self, template, device):
        self.closed = False

    def upload(self, blob, version):
        raise AssertionError("never called")

    def run(self, blob, version, xq):
        raise AssertionError("never called")

    def close(self):
        self.closed = True


def test_a_runner_outside_the_target_interface_is_refused(monkeypatch):
    monkeypatch.setattr(runners, "_factories", dict(runners._factories))
    made = []
    runners.register_runner("upload-test", lambda t, d: made.append(_UploadRunner(t, d)) or made[-1])
    with pytest.raises(ConfigError, match=r"'upload-test' gives a _UploadRunner without stage: a runner is "
                                          r"a reparam.ParameterTarget"):
        MatMulEngine.from_template(256, backend="upload-test")
    assert made[0].closed  # refused, and not left holding what it opened


@pytest.mark.parametrize("name", ["cpu", "tpulang"])
def test_every_runner_is_the_stores_target_itself(name):
    """The runner the engine runs is the target its store stages each version on (no adapter, no second
    path for the blob): the same object, a ParameterTarget and a Runner."""
    from libredgetpu_ros.reparam import ParameterTarget

    with MatMulEngine.from_template(256, backend=name) as engine:
        assert engine._store._targets == [engine._runner]
        assert isinstance(engine._runner, ParameterTarget) and isinstance(engine._runner, runners.Runner)
        assert engine._runner.name == engine.backend == name
        assert (engine.choice, engine.fallback) == (f"{name} (requested)", "")
