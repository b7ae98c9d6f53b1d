"""Fuzz targets of the user-text readers (textdata.py): the IOSpec loader, YAML configs, JSON traces.

Seeds are the real Femtosense fixtures (11 IOSpecs written by femtorun / fmot / femtodriver and their trace
files) plus crafted texts for what byte mutations rarely reach on their own: anchors and aliases in every
section (a 3-level expansion within budget, a billion-laughs block, a recursive alias), nesting near and
past the depth budget in flow and block style, non-UTF-8 bytes, huge integers and YAML dates. The harness
splices chunks between seeds, which moves anchors, aliases and brackets into other documents.

Each target runs the reader and then what a consumer does with the result: for an IOSpec, ``describe()``
dumped as JSON (``iospec check --json``), the text summary's fields and both sequence engines; for YAML and
JSON, a bounded ``repr`` and a JSON dump. Only ``InputError`` (IOSpecError, TextDataError, ...) may come
out. ``test_fuzz_text.py`` runs a bounded budget of each in CI; for a long run::

    nice -n 19 .venv/bin/python libredgetpu_ros/test/fuzz/text_targets.py --cases 100000 [--target iospec]
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

try:
    from .harness import FuzzTarget, long_run
except ImportError:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from harness import FuzzTarget, long_run

from libredgetpu_ros.errors import InputError

IOSPECS = ("single_io_fmot16", "add_bc_api", "latched_one_fmot", "latched_two_api", "multi_output_fmot8",
           "padding_mixed_api", "complex_every2", "femtofile_roundtrip", "legacy_padding",
           "two_signatures_api", "latched_iospec")
TRACES = ("add_bc_api", "complex_every2", "latched_two_api")


def _bomb(levels: int) -> str:
    """A block-style ``comments:`` of input C holding ``levels`` levels of 10 aliases each."""
    lines = ["  C:", "    type: input", "    varname: C", "    length: 4", "    precision: 16",
             "    padded_length: null", "    comments:",
             '      l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"      l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


ANCHORED = """\
inputs:
  B: &in {quantization: &q {scale: 0.5, zero_pt: 0}, type: input, varname: B, length: 4, precision: 16,
          padded_length: null}
  C: {type: input, varname: C, length: 4, precision: 16, padded_length: null, quantization: *q}
outputs:
  A: {type: output, varname: A, length: 4, precision: 16, padded_length: null, quantization: *q}
simple_sequences:
  s: {type: simple_sequence, inputs: &ins [B, C], outputs: [A], comments: &c {}}
  t: {type: simple_sequence, inputs: *ins, outputs: [], comments: *c}
complex_sequences: {}
"""


_C_LINE = "  C: {type: input, varname: C, length: 4, precision: 16, padded_length: null, quantization: *q}\n"


def crafted_iospecs() -> list[bytes]:
    """IOSpecs with anchors and aliases in every section, plus the hostile variants listed above."""
    comments = "comments: &c {}"
    variants = [
        ANCHORED,
        ANCHORED.replace(comments, "comments: &c " + "[" * 60 + "]" * 60),              # near the budget
        ANCHORED.replace(comments, "comments: &c " + "[" * 70 + "]" * 70),              # past it
        ANCHORED + "".join(f"{' ' * (2 * i)}k{i}:\n" for i in range(70)),              # block style, past it
        ANCHORED.replace(_C_LINE, _bomb(3)),                                           # 1,000 nodes: loads
        ANCHORED.replace(_C_LINE, _bomb(9)),                                           # billion laughs
        ANCHORED.replace(comments, "comments: &c [*c]"),                                # recursive alias
        ANCHORED.replace("length: 4", "length: " + "1" * 60, 1).replace(
            "padded_length: null", "padded_length: 2024-01-01", 1).replace("scale: 0.5", "scale: 1e999"),
    ]
    out = [t.encode() for t in variants]
    out.append(ANCHORED.replace("varname: C", "varname: C\u00e9").encode("latin-1"))  # a Latin-1 byte
    out.append(ANCHORED.encode("utf-16"))                                              # UTF-16 with BOM
    return out


def consume_iospec(data: bytes) -> None:
    from libredgetpu_ros.femto import SequenceEngine, parse_iospec
    from libredgetpu_ros.textdata import clip_repr

    spec = parse_iospec(data, "fuzz.yaml")
    json.dumps(spec.describe(), default=str)
    for v in (*spec.inputs.values(), *spec.outputs.values()):
        clip_repr(v.raw)
    engine = SequenceEngine(spec)
    for vec in spec.inputs.values():
        with contextlib.suppress(InputError):  # sequence rules refusing a send are fine
            engine.send(vec.name, atomic=True)
    engine.take_ready()
    with contextlib.suppress(InputError):  # strict mode refusing complex sequences
        SequenceEngine(spec, strict=True)


_TOKENS = (":", " ", "\n", "- ", "[", "]", "{", "}", "'", '"', "&a ", "*a", "&b ", "*b", "0", "x", "\t", ", ",
           "? ", "!!str ", "1e999", "-1", "null", "2024-01-01")


def iospec_token_case(data: bytes, texts: list[str]) -> str:
    """A token-level edit of a fixture IOSpec chosen by the case bytes (deterministic per case): YAML
    syntax, anchors and aliases inserted, spans deleted or duplicated, where byte mutations of a text file
    mostly break the syntax at once."""
    rng = random.Random(zlib.crc32(data))
    chars = list(rng.choice(texts))
    for _ in range(rng.randint(1, 6)):
        pos = rng.randrange(len(chars) + 1)
        op = rng.random()
        if op < 0.3:
            del chars[pos: pos + rng.randint(1, 12)]
        elif op < 0.85:
            chars[pos:pos] = rng.choice(_TOKENS)
        else:  # duplicate a span elsewhere (anchors and aliases travel with it)
            a = rng.randrange(len(chars))
            chars[pos:pos] = chars[a: a + rng.randint(1, 80)]
    return "".join(chars)


def consume_yaml(data: bytes) -> None:
    from libredgetpu_ros.textdata import clip_repr, load_yaml

    doc = load_yaml(data, "fuzz.yaml", max_bytes=1 << 20)
    clip_repr(doc)
    json.dumps(doc, default=str, check_circular=True)


def consume_json(data: bytes) -> None:
    from libredgetpu_ros.textdata import clip_repr, load_json

    doc = load_json(data, "fuzz.json", max_bytes=1 << 20, max_depth=32)
    clip_repr(doc)
    json.dumps(doc)


def targets(fixtures: Callable[[str], Path]) -> dict[str, FuzzTarget]:
    """The text-reader targets; ``fixtures(relative name) -> Path`` finds the seeds."""
    specs = [fixtures(f"femto/{n}.yaml").read_bytes() for n in IOSPECS] + crafted_iospecs()
    config_dir = Path(__file__).resolve().parents[2] / "config"
    configs = [p.read_bytes() for p in sorted(config_dir.glob("*.yaml"))]
    traces = [fixtures(f"femto/{n}_traces.json").read_bytes()[:60_000] for n in TRACES]
    traces.append(b'{"traces": [{"name": "' + b"n" * 2000 + b'", "events": [' + b"[" * 30 + b"]" * 30
                  + b"]}]}")
    typed = (InputError,)
    texts = [s.decode() for s in specs[:len(IOSPECS)]] + [ANCHORED]
    return {
        "iospec": FuzzTarget("iospec", specs, consume_iospec, typed),
        "iospec_tokens": FuzzTarget("iospec_tokens", [bytes(8)], lambda data: consume_iospec(
            iospec_token_case(data, texts).encode()), typed),
        "yaml": FuzzTarget("yaml", specs[-9:] + configs, consume_yaml, typed),
        "json": FuzzTarget("json", traces, consume_json, typed),
    }


def main() -> int:
    from libredgetpu_ros.fixtures import fixture

    return long_run("long fuzz run of the user-text readers", lambda names: targets(fixture), cases=100_000,
                    time_limit_s=2.0, memory_limit_mb=512)


if __name__ == "__main__":
    sys.exit(main())
