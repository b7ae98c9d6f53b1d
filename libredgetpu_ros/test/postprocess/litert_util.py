"""LiteRT helpers for the post-processing tests (the independent reference)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from ai_edge_litert.interpreter import Interpreter
from libredgetpu_ros.backends.twin import cut_at_tensors


def cut_interpreter(twin: Path, outputs: list[str]) -> Interpreter:
    """LiteRT on the CPU twin cut so its outputs are the named boundary tensors."""
    content, _, _ = cut_at_tensors(twin.read_bytes(), outputs)
    interpreter = Interpreter(model_content=content)
    interpreter.allocate_tensors()
    return interpreter


def run(interpreter: Interpreter, image: np.ndarray) -> dict[str, np.ndarray]:
    """Run on one image; return every output by tensor name (raw, as a backend would)."""
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], image[None])
    interpreter.invoke()
    return {d["name"]: interpreter.get_tensor(d["index"]).copy() for d in interpreter.get_output_details()}
