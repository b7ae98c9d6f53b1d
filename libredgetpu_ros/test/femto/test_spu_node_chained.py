"""Issue 30, failure 11: the SPU node in strict mode (the default) on a chained spec.

``first: [P] -> [M]``, ``second: [M, Q] -> [Y]``: M is published and also reaches ``second`` inside the SPU.
Before: P fired ``first`` and M was published, then Q was refused (``declared-order: expected 'M' next``)
and every later P (``too-many-inputs``): 1 output of 14, diagnostics still OK "running". Now, the node in
its own process over DDS: seven P/Q rounds publish all 14 outputs with the reference runner's values;
a refused input turns diagnostics WARN and they stay WARN until an input is accepted again; every message
the node received is counted (``inputs_received`` = accepted + rejected).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from .._helpers import load_helper

spu_client = load_helper(Path(__file__).resolve().parent / "_spu_client.py")

pytestmark = [pytest.mark.ros]

NS = "/spu_chained"
FQN = f"{NS}/spu"
SCALE = 2.0 ** -8
ROUNDS = 7
WARN, OK = "1", "0"


def _vec(name: str, kind: str) -> dict:
    return {"type": kind, "varname": name, "length": 4, "precision": 16, "padded_length": 4,
            "quantization": {"scale": SCALE, "zero_pt": 0}, "comments": {}}


def write_program(tmp: Path) -> tuple[Path, Path]:
    seq = {"type": "simple_sequence", "comments": {}}
    spec = {"inputs": {"P": _vec("P", "input"), "Q": _vec("Q", "input")},
            "outputs": {"M": _vec("M", "output"), "Y": _vec("Y", "output")},
            "simple_sequences": {"first": {**seq, "inputs": ["P"], "outputs": ["M"]},
                                 "second": {**seq, "inputs": ["M", "Q"], "outputs": ["Y"]}},
            "complex_sequences": {}}
    program = {"outputs": {  # the reference runner's terms are inputs: Y from P (through M) and Q
        "M": {"terms": [{"input": "P", "weight": 2.0}]},
        "Y": {"terms": [{"input": "P", "weight": 2.0}, {"input": "Q", "weight": -1.0}], "bias": 0.25}}}
    (tmp / "spec.yaml").write_text(yaml.safe_dump(spec))
    (tmp / "program.yaml").write_text(yaml.safe_dump(program))
    return tmp / "spec.yaml", tmp / "program.yaml"


def test_strict_node_serves_every_output_of_a_chained_spec(ros_env, tmp_path: Path) -> None:
    from libredgetpu_ros.femto import load_iospec
    from libredgetpu_ros.femto.reference import ReferenceRunner
    from libredgetpu_ros.femto.vectors import dequantize, prepare_input

    spec_path, program_path = write_program(tmp_path)
    proc = ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.ros.spu.node", "--ros-args",
                          "-r", f"__ns:={NS}", "-p", f"iospec:={spec_path}", "-p", f"program:={program_path}",
                          "-p", "diagnostics_period:=0.1"], "spu")
    c = spu_client.SpuClient(ros_env, "spu_chained_client", FQN, {"P": False, "Q": False}, ("M", "Y"),
                             depth=50)
    assert c.transition(1) and c.transition(3)
    c.wait(lambda: c.diag, "diagnostics")
    assert c.last("strict") == "True"

    spec = load_iospec(spec_path)
    ref = ReferenceRunner(spec, program_path)
    ref.reset()
    vecs = {v.name: v for v in spec.inputs.values()}
    outs = {v.name: v for v in spec.outputs.values()}
    want: dict[str, list[np.ndarray]] = {"M": [], "Y": []}

    def send(name: str, values: list[float], stamp: int) -> None:
        c.send(name, values, stamp)
        ref.send(name, prepare_input(np.array(values), vecs[name]))
        for out, q in ref.recv().items():
            want[out].append(dequantize(q[:4], outs[out]))

    rng = np.random.default_rng(11)
    for i in range(ROUNDS):
        send("P", np.round(rng.uniform(-1, 1, 4), 2).tolist(), 100 + 2 * i)
        c.wait(lambda i=i: len(c.outputs["M"]) > i, f"M of round {i}")
        send("Q", np.round(rng.uniform(-1, 1, 4), 2).tolist(), 101 + 2 * i)
        c.wait(lambda i=i: len(c.outputs["Y"]) > i, f"Y of round {i} (before: Q refused, declared-order)")
    assert proc.poll() is None
    for name in ("M", "Y"):
        assert len(c.outputs[name]) == ROUNDS == len(want[name])
        for i, (stamp, values) in enumerate(c.outputs[name]):
            assert stamp == (100 if name == "M" else 101) + 2 * i
            np.testing.assert_allclose(values, want[name][i], atol=0)
    c.wait(lambda: c.last("_level") == OK and c.last("inputs_accepted") == str(2 * ROUNDS), "OK, all taken")

    # A refused input: WARN, and WARN for as long as nothing is accepted (before: OK after one report).
    send("Q", [0.5] * 4, 500)
    c.send("Q", [0.5] * 4, 501)  # a second Q before P: too many inputs for `second` (refused)
    c.wait(lambda: c.last("rejected.too-many-inputs") == "1", "the second Q refused")
    seen = len(c.diag)
    time.sleep(0.6)  # about six diagnostics periods
    with c.lock:
        later = c.diag[seen:]
    assert len(later) >= 3 and all(d["_level"] == WARN and d["refusing"] == "True" for d in later), later
    send("P", [0.25] * 4, 502)  # completes `second` with the pending Q
    c.wait(lambda: len(c.outputs["Y"]) == ROUNDS + 1, "Y after the refusal")
    c.wait(lambda: c.last("_level") == OK and c.last("refusing") == "False", "OK again")
    assert c.last("inputs_received") == str(2 * ROUNDS + 3)  # paced: DDS delivered every message
    assert int(c.last("inputs_accepted")) + int(c.last("rejected")) == 2 * ROUNDS + 3
    assert c.transition(4) and c.transition(2)
