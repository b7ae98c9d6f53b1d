"""The NumPy reference runner: IOSpec-shaped affine programs described in a small YAML.

A program gives every IOSpec output as an affine function of input vectors, in real units::

    outputs:
      A:                        # an IOSpec output varname
        terms:                  # sum of weight * input
          - {input: B, weight: 1.0}           # scalar
          - {input: latchedC, weight: [1, 2]} # per-element (input length == output length)
          # or a matrix [output length][input length]
        bias: 0.0               # scalar or a list of the output's length
        activation: none        # none | relu

Inputs arrive quantized (the IOSpec's scale / zero point) and padded; the runner dequantizes the first
``length`` elements, evaluates in float64, quantizes with the output's scale, saturates to its precision and
pads. Every input, latched or not, holds its last value, 0 after reset (the SPU's latched-input rule). When
a sequence fires (femtorun semantics, via :class:`SequenceEngine`) its outputs are computed from the values
held at that moment.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from libredgetpu_ros import textdata
from libredgetpu_ros.errors import ConfigError, IOSpecError, TextDataError
from libredgetpu_ros.femto.engine import SequenceEngine
from libredgetpu_ros.femto.iospec import IOSpec, VectorSpec
from libredgetpu_ros.femto.vectors import dequantize, int_dtype, pad, quantize

# Programs are parsed by PyYAML's pure loader (textdata): the size bound is what keeps a node's configure
# short whatever the file, far above any real program (the figures: docs/femto.md).
MAX_PROGRAM_BYTES = 256 * 1024
MAX_PROGRAM_DEPTH = 16


@dataclass(frozen=True)
class _Term:
    input: str
    weight: np.ndarray  # shape (), (n,) or (out, in)


@dataclass(frozen=True)
class _Rule:
    terms: tuple[_Term, ...]
    bias: np.ndarray
    relu: bool


def _array(value: Any, where: str, shapes: tuple[tuple[int, ...], ...]) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"program {where}: {textdata.clip_repr(value, 80)} is not a number or a list of "
                          "numbers") from None
    if arr.shape not in shapes:
        raise ConfigError(f"program {where}: shape {arr.shape} is not one of {list(shapes)}")
    if not np.isfinite(arr).all():
        raise ConfigError(f"program {where}: contains NaN or infinity")
    return arr


def load_program(source: str | Path | dict, spec: IOSpec) -> dict[str, _Rule]:
    """Validate a program against the IOSpec; errors name the key and value."""
    if not isinstance(source, str | Path):
        doc, origin = source, "<program>"
    else:
        origin = textdata.clip(source)
        try:
            doc = textdata.load_yaml_file(source, "program", max_bytes=MAX_PROGRAM_BYTES,
                                          max_depth=MAX_PROGRAM_DEPTH)
        except TextDataError as exc:  # a size over the limit is refused before any parsing
            note = (f" (a reference program is at most {MAX_PROGRAM_BYTES >> 10} KiB and {MAX_PROGRAM_DEPTH} "
                    f"levels deep: docs/femto.md)") if exc.kind == "limit" else ""
            raise ConfigError(f"{exc}{note}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("outputs"), dict):
        raise ConfigError(f"program {origin}: expected a mapping with an 'outputs' mapping")
    ins = {v.name: v for v in spec.inputs.values()}
    outs = {v.name: v for v in spec.outputs.values()}
    rules: dict[str, _Rule] = {}
    for name, body in doc["outputs"].items():
        if name not in outs:
            raise ConfigError(f"program {origin}: outputs.{name}: not an output of {spec.origin} "
                              f"(outputs: {sorted(outs)})")
        if not isinstance(body, dict):
            raise ConfigError(f"program {origin}: outputs.{name}: expected a mapping, got "
                              f"{textdata.clip_repr(body, 80)}")
        out_len = outs[name].length
        terms = []
        raw_terms = body.get("terms", [])
        if not isinstance(raw_terms, list):
            raise ConfigError(f"program {origin}: outputs.{name}.terms: expected a list")
        for i, term in enumerate(raw_terms):
            where = f"outputs.{name}.terms[{i}]"
            if not isinstance(term, dict) or term.get("input") not in ins:
                raise ConfigError(f"program {origin}: {where}.input: {textdata.clip_repr(term, 80)} does not "
                                  "name an input of "
                                  f"{spec.origin} (inputs: {sorted(ins)})")
            in_len = ins[term["input"]].length
            shapes: tuple[tuple[int, ...], ...] = ((), (out_len, in_len))
            if in_len == out_len:
                shapes += ((out_len,),)
            terms.append(_Term(term["input"], _array(term.get("weight", 1.0), f"{where}.weight", shapes)))
        bias = _array(body.get("bias", 0.0), f"outputs.{name}.bias", ((), (out_len,)))
        activation = body.get("activation", "none")
        if activation not in ("none", "relu"):
            raise ConfigError(f"program {origin}: outputs.{name}.activation: "
                              f"{textdata.clip_repr(activation, 80)} (none | relu)")
        rules[name] = _Rule(tuple(terms), np.broadcast_to(bias, (out_len,)).copy(), activation == "relu")
    produced = {spec.outputs[n].name for s in spec.sequences for n, _ in s.outputs if n in spec.outputs}
    missing = sorted((set(outs) & produced) - set(rules))  # an output no sequence produces needs no rule
    if missing:
        raise ConfigError(f"program {origin}: no rule for outputs {missing}")
    return rules


class ReferenceRunner:
    """The SPU program evaluated with NumPy (see the module docstring)."""

    name = "reference"

    def __init__(self, spec: IOSpec, program: str | Path | dict) -> None:
        self.spec = spec
        self.program_source = str(program) if isinstance(program, str | Path) else program
        self._rules = load_program(program, spec)
        self._engine = SequenceEngine(spec)
        self._inputs = {v.name: v for v in spec.inputs.values()}
        self._seq_outputs = {s.key: [spec.outputs[n] for n, _ in s.outputs if n in spec.outputs]
                             for s in spec.sequences}
        self._values: dict[str, np.ndarray] = {}
        self._produced: dict[str, np.ndarray] = {}

    def reset(self) -> None:
        self._engine.reset()
        self._values = {n: np.zeros(v.target_length, int_dtype(v.precision)) for n, v in self._inputs.items()}
        self._produced.clear()

    def send(self, name: str, vector: np.ndarray) -> None:
        vec = self._inputs.get(name)
        if vec is None:
            raise IOSpecError(f"reference runner: no input named {name!r}", kind="KeyError", key="name",
                              value=name)
        v = np.asarray(vector)
        if v.shape != (vec.target_length,) or not np.issubdtype(v.dtype, np.integer):
            raise IOSpecError(f"reference runner: input {name!r} must be an integer vector of "
                              f"{vec.target_length}, got {v.dtype} {v.shape}", key=name, value=v.shape)
        fired = self._engine.send(name)  # femtorun rules; raises SpuSequenceError before storing anything
        self._values[name] = v.copy()
        for seq in fired:
            for out in self._seq_outputs.get(seq, ()):
                self._produced[out.name] = self._evaluate(out)

    def _evaluate(self, out: VectorSpec) -> np.ndarray:
        rule = self._rules[out.name]
        y = rule.bias.copy()
        for term in rule.terms:
            vec = self._inputs[term.input]
            x = dequantize(self._values[term.input][: vec.length], vec)
            y += term.weight @ x if term.weight.ndim == 2 else term.weight * x
        if rule.relu:
            np.maximum(y, 0.0, out=y)
        return pad(quantize(y, out), out.target_length)

    def recv(self) -> dict[str, np.ndarray]:
        ready = self._engine.take_ready()
        return {name: self._produced.pop(name) for name in ready if name in self._produced}

    def describe(self) -> dict:
        src = self.program_source
        return {"runner": self.name, "program": src if isinstance(src, str) else "<inline>",
                "outputs": {n: {"terms": [t.input for t in r.terms], "relu": r.relu}
                            for n, r in self._rules.items()}}

    def close(self) -> None:
        self._values.clear()
        self._produced.clear()
