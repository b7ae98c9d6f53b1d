"""A robotics template opened on the CPU twin runs LiteRT once on a zero input at open (its first invoke
prepares the kernels and touches the arena: 2-4x a later frame, which the first real frame paid), and a twin
that cannot run closes its backend before the error leaves. A backend double is never run by the warm-up."""

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
