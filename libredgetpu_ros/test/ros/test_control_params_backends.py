"""The control node's `backend` choices are the MatMul engine's runner registry (plus auto), not a copy."""

from __future__ import annotations


def test_backend_choices_follow_the_runner_registry() -> None:
    from libredgetpu_ros.matmul.runners import runner_names
    from libredgetpu_ros.ros.control.params import BACKENDS, PARAM_TABLE

    assert ("auto", *runner_names()) == BACKENDS
    assert {"cpu", "edgetpu", "tpulang"} <= set(BACKENDS)  # tpulang: declared by sophgo's entry point
    assert tuple(PARAM_TABLE.specs["backend"].choices) == BACKENDS
