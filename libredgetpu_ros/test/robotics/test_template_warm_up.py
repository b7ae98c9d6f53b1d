"""A robotics template opened on the CPU twin runs LiteRT once on a zero input at open (its first invoke
prepares the kernels and touches the arena: 2-4x a later frame, which the first real frame paid), and a twin
that cannot run closes its backend before the error leaves, as does any failure after the backend opened
(building the parameter store). A backend double is never run by the warm-up."""

from __future__ import annotations

import numpy as np
import pytest
from libredgetpu_ros.backends.cpu import CpuBackend
from libredgetpu_ros.robotics.template import TemplateRunner, load_template


def test_the_twin_is_invoked_once_at_open_on_zeros(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[np.ndarray] = []
    real_run = CpuBackend.run

    def counting(self, inputs, *args, **kwargs):
        seen.append(np.array(inputs[0]))
        return real_run(self, inputs, *args, **kwargs)

    monkeypatch.setattr(CpuBackend, "run", counting)
    template = load_template("color_red_64x64")
    runner = TemplateRunner(template, backend="cpu")
    try:
        assert len(seen) == 1
        assert seen[0].shape == tuple(template.input.shape) and not seen[0].any()
    finally:
        runner.close()


def test_a_twin_that_cannot_run_closes_its_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[CpuBackend] = []
    real_close = CpuBackend.close

    def broken(self, inputs, *args, **kwargs):
        raise RuntimeError("the twin cannot run")

    def counting_close(self) -> None:
        closed.append(self)
        real_close(self)

    monkeypatch.setattr(CpuBackend, "run", broken)
    monkeypatch.setattr(CpuBackend, "close", counting_close)
    with pytest.raises(RuntimeError, match="cannot run"):
        TemplateRunner(load_template("color_red_64x64"), backend="cpu")
    assert len(closed) == 1


@pytest.mark.parametrize("kwargs, error", [({"twin_tensors": (10 ** 6,)}, IndexError),
                                           ({"blobs": {"bogus": np.zeros(4, np.uint8)}}, ValueError)])
def test_a_parameter_store_that_cannot_be_built_closes_the_backend(monkeypatch: pytest.MonkeyPatch, kwargs,
                                                                    error) -> None:
    """The backend is open when the parameter store is built (a twin tensor that is not there, a blob of an
    unknown kind): the error leaves with the backend closed, not leaked."""
    opened: list[CpuBackend] = []
    closed: list[CpuBackend] = []
    real_load, real_close = CpuBackend.load, CpuBackend.close

    def counting_load(self, *args, **kwargs):
        opened.append(self)
        return real_load(self, *args, **kwargs)

    def counting_close(self) -> None:
        closed.append(self)
        real_close(self)

    monkeypatch.setattr(CpuBackend, "load", counting_load)
    monkeypatch.setattr(CpuBackend, "close", counting_close)
    with pytest.raises(error):
        TemplateRunner(load_template("color_red_64x64"), backend="cpu", **kwargs)
    assert len(opened) == 1 and closed == opened


def test_a_backend_double_is_not_run_at_open() -> None:
    runs: list[object] = []

    class Double:
        name = "cpu"

        def run(self, *args, **kwargs):
            runs.append(args)

        def stage(self, parameters) -> None:
            pass

        def close(self) -> None:
            pass

    runner = TemplateRunner(load_template("color_red_64x64"), backend_object=Double())
    runner.close()
    assert runs == []
