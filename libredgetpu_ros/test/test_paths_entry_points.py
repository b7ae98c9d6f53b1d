"""Every public reader of a user's path names a FIFO as one at once (paths.check_regular), never blocks on it.

Before: these entry points said "is not a file" (errors.not_a_file) for a FIFO, a device, a socket or a
folder alike. Each call runs in a thread joined with a bound: were it to block opening the FIFO, the test
opens the FIFO's write end (which releases a reader blocked in open or read) and fails instead of hanging."""

from __future__ import annotations

import os
import sys
import threading
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from libredgetpu_ros.errors import ConfigError, InputError, LibrEdgeTpuError, ModelFormatError
from libredgetpu_ros.sophgo.ir import TpuLangError

pytestmark = pytest.mark.timeout(180)

DENSE = "matmul/dense_256_edgetpu.tflite"
CASE = "tpulang/f32_conv_bias_relu/f32_conv_bias_relu.json"
BOUND_S = 60.0  # generous on a loaded machine; a blocked open never returns at all


def _load_template(fifo: Path, tmp: Path, fixture_path: Callable[[str], Path]) -> None:
    from libredgetpu_ros.robotics.template import load_template

    load_template(fifo.rename(tmp / "spot_edgetpu.tflite"))


def _load_template_twin(fifo: Path, tmp: Path, fixture_path: Callable[[str], Path]) -> None:
    from libredgetpu_ros.robotics.template import load_template

    fifo.rename(tmp / "spot.tflite")
    (tmp / "spot_edgetpu.json").write_text("{}")
    load_template(tmp / "spot.tflite")


def _cpu_model(fifo: Path, tmp: Path, fixture_path: Callable[[str], Path]) -> None:
    from libredgetpu_ros.backends import open_backend

    open_backend("cpu", fixture_path(DENSE), cpu_model_path=fifo)


def _cpu_twin_beside(fifo: Path, tmp: Path, fixture_path: Callable[[str], Path]) -> None:
    from libredgetpu_ros.backends import open_backend

    (tmp / "m_edgetpu.tflite").write_bytes(fixture_path(DENSE).read_bytes())
    fifo.rename(tmp / "m.tflite")
    open_backend("cpu", tmp / "m_edgetpu.tflite")


def _femtofile(fifo: Path, tmp: Path, fixture_path: Callable[[str], Path]) -> None:
    from libredgetpu_ros.femto import load_iospec
    from libredgetpu_ros.femto.runner import open_runner

    open_runner("femtodriver", load_iospec(fixture_path("femto/single_io_fmot16.yaml")), femtofile=fifo)


def _fqir(fifo: Path, tmp: Path, fixture_path: Callable[[str], Path]) -> None:
    from libredgetpu_ros.femto import load_iospec
    from libredgetpu_ros.femto.runner import open_runner

    open_runner("fqir", load_iospec(fixture_path("femto/single_io_fmot16.yaml")), fqir=fifo)


def _weight_npz(fifo: Path, tmp: Path, fixture_path: Callable[[str], Path]) -> None:
    from libredgetpu_ros.sophgo.replay import replay_case

    replay_case(fixture_path(CASE), weights_npz=fifo)


def _pipeline(fifo: Path, tmp: Path, fixture_path: Callable[[str], Path]) -> None:
    from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig

    PerceptionPipeline.from_config(PipelineConfig(model=str(fifo), backend="cpu"))


def _cli(*argv: str) -> Callable[[Path, Path, Callable[[str], Path]], None]:
    def run(fifo: Path, tmp: Path, fixture_path: Callable[[str], Path]) -> None:
        from libredgetpu_ros.cli.main import main

        code = main([a.format(fifo=fifo, out=tmp / "out") for a in argv])
        raise SystemExit(code)

    return run


ENTRY_POINTS = {
    "load_template compiled": (_load_template, InputError),
    "load_template twin": (_load_template_twin, ModelFormatError),
    "open_backend cpu_model_path": (_cpu_model, InputError),
    "open_backend twin beside": (_cpu_twin_beside, InputError),
    "femtodriver femtofile": (_femtofile, ConfigError),
    "fqir pickle": (_fqir, ConfigError),
    "replay_case weight npz": (_weight_npz, TpuLangError),
    "PerceptionPipeline model": (_pipeline, InputError),
    "cli plan": (_cli("plan", "{fifo}"), SystemExit),
    "cli export-tpulang classifier": (_cli("export-tpulang", "classifier", "{fifo}", "--out", "{out}"),
                                      SystemExit),
}


@pytest.fixture
def vendor_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The femto runners import femtodriver / fmot / torch before looking at the path; these are not
    installed here, so bare importable modules stand in (the path check runs before any of them is used)."""
    for name in ("femtodriver", "femtodriver.fqir_runner", "fmot", "torch"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))


def _call_bounded(call: Callable[[], None], fifo: Path) -> BaseException | None:
    caught: list[BaseException] = []

    def target() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the test thread
            caught.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(BOUND_S)
    if thread.is_alive():
        for path in fifo.parent.iterdir():  # the FIFO may have been renamed: release whichever it is
            if path.is_fifo():
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(BOUND_S)
        pytest.fail(f"blocked on the FIFO for {BOUND_S:.0f} s")
    return caught[0] if caught else None


@pytest.mark.usefixtures("vendor_modules")
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_a_fifo_is_named_at_once_without_blocking(entry: str, tmp_path: Path, fixture_path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    call, error = ENTRY_POINTS[entry]
    folder = tmp_path / "in"
    folder.mkdir()
    fifo = folder / "input.fifo"
    os.mkfifo(fifo)
    exc = _call_bounded(lambda: call(fifo, folder, fixture_path), fifo)
    assert type(exc) is error, repr(exc)
    if error is SystemExit:  # the CLI: exit 2 (bad input), one line on stderr
        err = capsys.readouterr().err
        assert exc.code == 2 and "is a FIFO, not a regular file" in err, err
    else:
        assert isinstance(exc, LibrEdgeTpuError) and "is a FIFO, not a regular file" in str(exc), str(exc)
