"""Femtosense IOSpec files: load, validate exactly as femtorun 4.1.2 does, describe.

An IOSpec YAML names the SPU program's input and output vectors and the *sequences* saying which inputs must
arrive before each output (see docs/femto.md). femtorun accepts or rejects a file by a few specific checks
(``io_spec_data.check_IOSpecData`` then the graph build in ``IOSpec.__init__``); :func:`parse_iospec`
makes the same checks in the same order, so a file gets the same verdict and the same exception kind, and
raises :class:`IOSpecError` naming the key and value. Things femtorun accepts but that cannot work (a
sequence input nobody declared, an output without a producer, ``padded_length < length``...) are accepted
too and listed in :attr:`IOSpec.warnings`.

The graph itself (nodes, edges with their counts, ordered like networkx's) is built by :mod:`.graph`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from libredgetpu_ros import textdata
from libredgetpu_ros.errors import IOSpecError, TextDataError
from libredgetpu_ros.femto.graph import SequenceGraph, build_graph
from libredgetpu_ros.femto.vectors import VectorSpec, words_femtodriver, words_packed

SECTIONS = ("inputs", "outputs", "simple_sequences", "complex_sequences")
# (key, check) in femtorun's TypedDict annotation order; check None = presence only.
_INOUT_KEYS = (("type", None), ("varname", str), ("length", int), ("precision", int), ("padded_length", None))
_SIMPLE_KEYS = (("type", None), ("outputs", "list_of_str"), ("inputs", "list_of_str"))
_COMPLEX_KEYS = (("type", None), ("outputs", None), ("inputs", None))
_CHECKS = {"inputs": ("IOSpecInout", _INOUT_KEYS), "outputs": ("IOSpecInout", _INOUT_KEYS),
           "simple_sequences": ("IOSpecSimpleSequence", _SIMPLE_KEYS),
           "complex_sequences": ("IOSpecComplexSequence", _COMPLEX_KEYS)}
MAX_TEXT_BYTES = 4 * 1024 * 1024  # an IOSpec is a few KB; refuse to parse anything absurd
# Nesting and alias budgets (textdata.py): an IOSpec nests 4 levels; femtorun's pure-Python composer itself
# fails near 500. Aliases (fmot never writes them) load as femtorun loads them up to the expansion budget.
MAX_DEPTH = 64
MAX_ALIAS_NODES = 100_000
MAX_VECTOR_LENGTH = 1 << 20       # elements; an SPU core has 1 MB of data memory


@dataclass(frozen=True)
class SequenceSpec:
    """One sequence: inputs/outputs as (node, count) in declared order; ``index`` is the SPU sequence id."""

    key: Any
    index: int
    kind: str                      # "simple" | "complex"
    inputs: tuple[tuple[Any, Any], ...]
    outputs: tuple[tuple[Any, Any], ...]

    @property
    def latched(self) -> bool:
        return not self.outputs


@dataclass
class IOSpec:
    """A loaded, femtorun-valid IOSpec."""

    data: dict
    origin: str
    inputs: dict[Any, VectorSpec]
    outputs: dict[Any, VectorSpec]
    sequences: list[SequenceSpec]
    graph: SequenceGraph
    is_simple: bool
    simple_action: Any
    simple_inputs: list | None
    simple_outputs: list | None
    warnings: list[str]

    def input_by_name(self, varname: str) -> VectorSpec:
        return self._by_name("inputs", varname)

    def output_by_name(self, varname: str) -> VectorSpec:
        return self._by_name("outputs", varname)

    def _by_name(self, key: str, varname: str) -> VectorSpec:
        section: dict[str, VectorSpec] = getattr(self, key)
        for v in section.values():
            if v.name == varname:
                return v
        raise IOSpecError(f"{self.origin}: no {key[:-1]} named {_short(varname)}", kind="KeyError", key=key,
                          value=varname)

    def _padding(self, section: dict) -> dict[str, tuple[tuple[Any], tuple[Any]]]:
        return {v.name: ((v.length,), (v.padded_length,)) for v in section.values()}

    @property
    def input_padding(self) -> dict[str, tuple[tuple[Any], tuple[Any]]]:
        """femtorun's ``input_padding``: varname -> ((length,), (padded_length,))."""
        return self._padding(self.inputs)

    @property
    def output_padding(self) -> dict[str, tuple[tuple[Any], tuple[Any]]]:
        return self._padding(self.outputs)

    def latched_input_names(self) -> list:
        """femtorun's rule (input keys in no output-producing simple sequence), sorted (femtorun: a set)."""
        names = set(self.inputs)
        for seq in self.sequences:
            if seq.kind == "simple" and seq.outputs:
                names.difference_update(node for node, _ in seq.inputs)
        return sorted(names, key=str)

    def latched_inputs(self) -> list[VectorSpec]:
        """Inputs that feed only output-less sequences (the SPU's latched inputs), in declaration order.

        Structural, unlike femtorun's ``latched_input_names`` (which also counts complex-sequence inputs
        and inputs in no sequence)."""
        feeds: dict[Any, list[bool]] = {}
        for seq in self.sequences:
            for node, _ in seq.inputs:
                feeds.setdefault(node, []).append(bool(seq.outputs))
        return [v for k, v in self.inputs.items() if k in feeds and not any(feeds[k])]

    def streaming_inputs(self) -> list[VectorSpec]:
        """Inputs that feed at least one output-producing sequence, in declaration order."""
        latched = {v.key for v in self.latched_inputs()}
        return [v for k, v in self.inputs.items() if k not in latched and any(
            k in dict(s.inputs) for s in self.sequences if s.outputs)]

    def describe(self) -> dict:
        """JSON-ready summary (the ``iospec check --json`` output)."""
        def vec(v: VectorSpec) -> dict:
            return {"key": str(v.key), "name": v.name, "length": v.length, "precision": v.precision,
                    "padded_length": v.padded_length, "scale": v.scale, "zero_point": v.zero_point,
                    "latch_hint": v.latch_hint, "length_64b_words": v.length_64b_words,
                    "words_femtodriver": words_femtodriver(v.target_length),
                    "words_packed": words_packed(v.target_length, v.precision)}

        return {
            "origin": self.origin,
            "inputs": [vec(v) for v in self.inputs.values()],
            "outputs": [vec(v) for v in self.outputs.values()],
            "sequences": [{"id": s.index, "name": str(s.key), "kind": s.kind, "latched": s.latched,
                           "inputs": [[str(n), c] for n, c in s.inputs],
                           "outputs": [[str(n), c] for n, c in s.outputs]} for s in self.sequences],
            "latched_inputs": [str(k) for k in self.latched_input_names()],
            "is_simple": self.is_simple,
            "simple_action": None if self.simple_action is None else str(self.simple_action),
            "warnings": list(self.warnings),
        }


def load_iospec(path: str | Path, max_bytes: int = MAX_TEXT_BYTES) -> IOSpec:
    """Read and validate an IOSpec file; errors name the file, key and value. ``max_bytes`` (at most
    ``MAX_TEXT_BYTES``) lets a caller that must stay responsive refuse a large file before any parsing."""
    p = Path(path)
    try:
        data = textdata.read_file(p, "IOSpec", min(max_bytes, MAX_TEXT_BYTES))
    except TextDataError as exc:  # missing, too large (kind "limit") or unreadable
        raise IOSpecError(str(exc), kind=exc.kind, key="size" if exc.kind == "limit" else "path",
                          value=str(p)) from None
    return parse_iospec(data, origin=textdata.clip(p))


def parse_iospec(text: str | bytes, origin: str = "<iospec>") -> IOSpec:
    """Validate IOSpec YAML text the way femtorun 4.1.2 does (same verdict, same exception kind).

    femtorun reads the file as UTF-8 text (``open(path)``), so bytes that are not UTF-8 (a UTF-16 file
    with its BOM, a Latin-1 byte) fail with ``UnicodeDecodeError`` before any parsing, as there. Refusals
    femtorun does not make (size, nesting, alias expansion: see textdata.py) have ``kind == "limit"``."""
    try:
        data = textdata.load_yaml(text, origin, max_bytes=MAX_TEXT_BYTES, max_depth=MAX_DEPTH,
                                  max_alias_nodes=MAX_ALIAS_NODES)
    except TextDataError as exc:
        raise IOSpecError(str(exc), kind=exc.kind, femtorun_message=exc.detail, key="yaml",
                          value=None) from None
    return iospec_from_data(data, origin)


class _Where:
    """The key path being checked, for the error message when a Python operation fails on bad data."""

    def __init__(self) -> None:
        self.path = "document"
        self.value: Any = None

    def at(self, path: str, value: Any) -> None:
        self.path, self.value = path, value


def _fail(origin: str, where: _Where, exc: BaseException) -> IOSpecError:
    text = textdata.clip(str(exc) or type(exc).__name__)
    return IOSpecError(f"{origin}: {textdata.clip(where.path)}: {text} (value {_short(where.value)})",
                       kind=type(exc).__name__, femtorun_message=str(exc), key=where.path, value=where.value)


def _short(value: Any) -> str:
    """A bounded repr: a value may be megabytes of text or an alias-shared structure."""
    return textdata.clip_repr(value, 80)


def iospec_from_data(data: Any, origin: str = "<iospec>") -> IOSpec:
    """Validate an already-parsed IOSpec document (dict) the way femtorun does."""
    where = _Where()
    try:
        _check_document(data, where)
        # femtorun's IOSpec.__init__ then fills missing sections with {} (a non-dict document fails here).
        for section in SECTIONS:
            where.at(section, data)
            if section not in data:
                data[section] = {}
        simple = _simple_properties(data, where)
        graph = build_graph(data, where)
    except IOSpecError:
        raise
    except (ValueError, TypeError, AttributeError, KeyError, IndexError, AssertionError,
            RecursionError) as exc:
        raise _fail(origin, where, exc) from None
    return _describe(data, origin, graph, simple)


def _check_document(data: Any, where: _Where) -> None:
    """femtorun's ``check_IOSpecData``: section names, then required keys and the few type checks."""
    where.at("document", data)
    for key in data:
        if key not in SECTIONS:
            where.at(str(key), key)
            raise ValueError(f"undefined IOSpec section header {key}")
    for section in SECTIONS:
        where.at(section, data)
        if section not in data:
            continue
        cls_name, keys = _CHECKS[section]
        for objname, obj in data[section].items():
            for key, check in keys:
                where.at(f"{section}.{objname}.{key}", obj)
                if key not in obj:
                    raise ValueError(f"{cls_name} requires key {key}")
                if check is None:
                    continue
                value = obj[key]
                where.value = value
                if check in (str, int):
                    if not isinstance(value, check):
                        raise ValueError(f"{cls_name} requires key {key} to be of type {check}, "
                                         f"saw {type(value)}")
                elif not all([isinstance(el, str) for el in value]):
                    raise ValueError(f"{cls_name} requires key {key} to be list of str, saw something else")


def _simple_properties(data: dict, where: _Where) -> tuple[bool, Any, list | None, list | None]:
    """femtorun's ``_set_if_simple`` (it runs before the graph is built, so its errors come first)."""
    complex_seqs = data["complex_sequences"]
    for name, obj in complex_seqs.items():
        where.at(f"complex_sequences.{name}", obj)
        for _io, val in obj["inputs"].items():
            where.value = val
            if val > 1:
                return False, None, None, None
        for _io, val in obj["outputs"].items():
            where.value = val
            if val > 1:
                return False, None, None, None
    merged = data["simple_sequences"] | complex_seqs
    count = 0
    for name, obj in merged.items():
        where.at(f"sequences.{name}.outputs", obj)
        if len(obj["outputs"]) > 0:
            count += 1
    if count > 1:
        return False, None, None, None
    action, ins, outs = None, None, None
    for name, obj in merged.items():
        where.at(f"sequences.{name}", obj)
        action, ins, outs = name, list(obj["inputs"]), list(obj["outputs"])
    return True, action, ins, outs


def _number(value: Any) -> float | None:
    """A finite float, or None (femtorun never reads ``quantization``: 10**400 loads, scale unusable)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int beyond float range
        return None
    return number if math.isfinite(number) else None


def _vector(key: Any, obj: dict, direction: str, warnings: list[str]) -> VectorSpec:
    where = f"{direction}s.{textdata.clip(key, 80)}"
    length, precision, padded = obj["length"], obj["precision"], obj["padded_length"]
    if isinstance(padded, bool) or (padded is not None and not isinstance(padded, int)):
        warnings.append(f"{where}.padded_length {_short(padded)} is not an integer; treated as null")
        padded = None
    if not 0 < length <= MAX_VECTOR_LENGTH:
        warnings.append(f"{where}.length {_short(length)} is outside 1..{MAX_VECTOR_LENGTH}; vectors cannot "
                        "be sent")
    if padded is not None and not length <= padded <= MAX_VECTOR_LENGTH:
        warnings.append(f"{where}.padded_length {_short(padded)} is below length {_short(length)} or too "
                        "large (femtodriver's femtofile export asserts length <= padded_length)")
    if precision not in (8, 16):
        warnings.append(f"{where}.precision {_short(precision)} is not 8 or 16 (the SPU's V8 / V16 vectors)")
    quant = obj.get("quantization")
    scale = zero = None
    if isinstance(quant, dict):
        scale, zero = _number(quant.get("scale")), _number(quant.get("zero_pt"))
    if scale is None or scale <= 0:
        scale = None
        warnings.append(f"{where}.quantization.scale {_short(quant)} is not a positive number; "
                        "values are sent as integers (scale 1)")
    words = obj.get("length_64b_words")
    target = length if padded is None else padded
    packed = -(-target * precision // 64) if isinstance(target, int) and isinstance(precision, int) else None
    if isinstance(words, int) and packed is not None and words != packed:
        warnings.append(f"{where}.length_64b_words {_short(words)} != {packed} words that {_short(target)} x "
                        f"{_short(precision)}-bit "
                        "elements pack into (femtodriver writes (padded_length + 3) // 4 for any precision; "
                        "which one the SPU expects for 8-bit vectors is unverified)")
    comments = obj.get("comments")
    latch = comments.get("latch") if isinstance(comments, dict) else None
    latch = latch if isinstance(latch, bool) else None
    return VectorSpec(key=key, name=obj["varname"], direction=direction, length=int(length),
                      precision=int(precision), padded_length=padded, scale=scale,
                      zero_point=0.0 if zero is None else zero, latch_hint=latch,
                      length_64b_words=obj.get("length_64b_words"), raw=obj)


def _describe(data: dict, origin: str, graph: SequenceGraph, simple: tuple) -> IOSpec:
    """Our own view of an accepted document; never raises (femtorun accepted it)."""
    warnings: list[str] = []
    inputs = {k: _vector(k, o, "input", warnings) for k, o in data["inputs"].items()}
    outputs = {k: _vector(k, o, "output", warnings) for k, o in data["outputs"].items()}
    sequences: list[SequenceSpec] = []
    for kind, section in (("simple", "simple_sequences"), ("complex", "complex_sequences")):
        for key, obj in data[section].items():
            if kind == "simple":
                ins = tuple(dict.fromkeys(obj["inputs"]).items())
                ins = tuple((n, 1) for n, _ in ins)
                outs = tuple((n, 1) for n in dict.fromkeys(obj["outputs"]))
            else:
                ins, outs = tuple(obj["inputs"].items()), tuple(obj["outputs"].items())
                for node, count in ins + outs:
                    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                        warnings.append(f"complex_sequences.{_short(key)}: count {_short(count)} for "
                                        f"{_short(node)} is not a positive integer")
            sequences.append(SequenceSpec(key=key, index=len(sequences), kind=kind, inputs=ins, outputs=outs))
            for node, _ in ins:
                produced = node in outputs and bool(graph.pred[graph.index[node]])
                if node not in inputs and not produced:  # a chained output arrives when its producer fires
                    warnings.append(f"{section}.{_short(key)}: input {_short(node)} is neither declared nor "
                                    "produced by a sequence; the sequence can never fire")
    warnings.extend(graph.problems())
    # once, not per input: a dict of every output sequence's inputs for each declared input made the load
    # quadratic in the inputs (47 s for an IOSpec just under the 4 MiB cap: bench/results/iospec_parse.md)
    feeding_outputs = {node for s in sequences if s.outputs for node, _ in s.inputs}
    for key, vec in inputs.items():
        if vec.latch_hint and key in feeding_outputs:
            warnings.append(f"inputs.{textdata.clip(key, 80)}: comments.latch is true but it feeds an "
                            "output-producing sequence")
    if sum(1 for s in sequences if s.outputs) > 1:
        warnings.append("more than one output-producing sequence: the SPU library firmware supports one "
                        "(plus latched sequences)")
    if any(s.kind == "complex" for s in sequences):
        warnings.append("complex sequences are not supported by the SPU library firmware (strict mode "
                        "refuses them)")
    is_simple, action, ins, outs = simple
    return IOSpec(data=data, origin=origin, inputs=inputs, outputs=outputs, sequences=sequences, graph=graph,
                  is_simple=is_simple, simple_action=action, simple_inputs=ins, simple_outputs=outs,
                  warnings=warnings)
