"""Fuzz targets of the TpuLang readers: the Top MLIR parser and the npz reader, seeded with the conformance
fixtures, each followed by what ``tpulang run`` does next.

- ``tpulang_mlir``: UTF-8 decode (as ``load_mlir``), parse, plan the memory against a 256 MiB budget, then
  execute on zero-filled inputs and weights of the declared shapes, and print the module back. A plan that
  under-estimates shows up as a MemoryError (the worker's address space is capped) or a hang.
- ``tpulang_mlir_numbers``: the same consumer on a fixture MLIR whose numbers (shapes, pads, strides,
  kernel sizes, axes, scales, zero points) are replaced by values taken from the fuzzed bytes: the input is
  ``[case index: 1 byte][(number index: u16, value: i64) x N]``, so the harness's size-like mutations
  (0, -1, 2**31-1, 2**63-1, ...) land in the fields the memory plan and the shape checks guard. Byte
  mutations of the text mostly stop at the parser; these reach the planner and the executor.
- ``tpulang_npz``: ``read_npz`` of the mutated file, whole and for one named member, with a 64 MiB budget.

``test_fuzz_tpulang.py`` runs a bounded budget of each in CI; for a long run::

    nice -n 19 .venv/bin/python libredgetpu_ros/test/fuzz/tpulang_targets.py --cases 100000 --seed 1
"""

from __future__ import annotations

import os
import random
import re
import struct
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

try:
    from .harness import FuzzTarget, long_run
except ImportError:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from harness import FuzzTarget, long_run

from libredgetpu_ros.errors import InputError

CASES = ("f32_add_concat_reshape_permute", "f32_conv_bias_relu", "f32_conv_s2_asym_maxpool",
         "f32_dwconv_dil2_avgpool", "f32_mlp_softmax", "q_conv_int_zp_requant", "q_conv_quant_perchannel",
         "q_matmul_int_requant")
RUN_BUDGET = 256 << 20
NPZ_BUDGET = 64 << 20


def consume_mlir(data: bytes) -> None:
    from libredgetpu_ros.sophgo.emitter import emit_mlir
    from libredgetpu_ros.sophgo.executor import execute
    from libredgetpu_ros.sophgo.ir import TpuLangError
    from libredgetpu_ros.sophgo.memory_plan import plan_memory
    from libredgetpu_ros.sophgo.parser import parse_mlir

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:  # load_mlir's verdict on the same bytes
        raise TpuLangError(f"not UTF-8 text ({exc})") from None
    module = parse_mlir(text, "fuzz")
    emit_mlir(module)
    plan = plan_memory(module, RUN_BUDGET)
    arrays = {node.name: np.zeros(plan.shapes[node.name], node.result.np_dtype)
              for node in module.ops if node.kind in ("top.Input", "top.Weight")}
    execute(module, arrays, arrays, memory_budget=RUN_BUDGET)


_NUMBER = re.compile(r"-?\d+")
_EDIT = struct.Struct("<Hq")


def consume_mlir_numbers(data: bytes) -> None:
    texts = _TEXTS  # filled by targets(): the fixture texts, read once in the parent before forking
    if not data:
        return
    text = texts[data[0] % len(texts)]
    spans = [m.span() for m in _NUMBER.finditer(text)]
    edits: dict[int, int] = {}
    for offset in range(1, len(data) - _EDIT.size + 1, _EDIT.size):
        index, value = _EDIT.unpack_from(data, offset)
        edits[index % len(spans)] = value
    pieces, last = [], 0
    for i in sorted(edits):
        start, end = spans[i]
        pieces += [text[last:start], str(edits[i])]
        last = end
    consume_mlir(("".join(pieces) + text[last:]).encode())


def _number_seeds() -> list[bytes]:
    """Instruction strings: every case with no edit, and with 1-4 edits of small values."""
    rng = random.Random(7)
    seeds = [bytes([k]) for k in range(len(CASES))]
    for _ in range(40):
        edits = b"".join(_EDIT.pack(rng.randrange(1 << 16), rng.choice((0, 1, 2, 3, 7, 64, 255, 8191)))
                         for _ in range(rng.randint(1, 4)))
        seeds.append(bytes([rng.randrange(len(CASES))]) + edits)
    return seeds


_TEXTS: list[str] = []


def consume_npz(data: bytes) -> None:
    from libredgetpu_ros.sophgo.npz_reader import read_npz

    fd, name = tempfile.mkstemp(suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        arrays = read_npz(name, "fuzz", max_bytes=NPZ_BUDGET)
        for key in list(arrays)[:1]:
            read_npz(name, "fuzz", names=[key], max_bytes=NPZ_BUDGET)
    finally:
        os.unlink(name)


def _mlir_seeds(fixtures: Callable[[str], Path]) -> list[bytes]:
    return [fixtures(f"tpulang/{case}/{case}_origin.mlir").read_bytes() for case in CASES]


def _npz_seeds(fixtures: Callable[[str], Path]) -> list[bytes]:
    seeds = []
    for case in CASES:
        folder = fixtures(f"tpulang/{case}/{case}.json").parent
        seeds += [p.read_bytes() for p in sorted(folder.glob("*.npz")) if p.stat().st_size < 1 << 20]
    return seeds


def _mlir_hot(data: bytes) -> list[tuple[int, int]]:
    """The numbers (shapes, pads, strides, scales): a flipped low bit turns one digit into another."""
    return [(m.start(), m.end()) for m in re.finditer(rb"\d+", data)][:4000]


def _npz_hot(data: bytes) -> list[tuple[int, int]]:
    """Zip headers (local, central directory, end record) and the .npy headers right after local headers."""
    ranges = [(len(data) - 512, len(data))]
    pos = data.find(b"PK\x03\x04")
    while pos >= 0 and len(ranges) < 64:
        ranges.append((pos, pos + 200))
        pos = data.find(b"PK\x03\x04", pos + 4)
    return ranges


def targets(fixtures: Callable[[str], Path]) -> dict[str, FuzzTarget]:
    typed = (InputError,)
    _TEXTS[:] = [seed.decode() for seed in _mlir_seeds(fixtures)]
    return {
        "tpulang_mlir": FuzzTarget("tpulang_mlir", _mlir_seeds(fixtures), consume_mlir, typed, _mlir_hot),
        "tpulang_mlir_numbers": FuzzTarget("tpulang_mlir_numbers", _number_seeds(), consume_mlir_numbers,
                                           typed),
        "tpulang_npz": FuzzTarget("tpulang_npz", _npz_seeds(fixtures), consume_npz, typed, _npz_hot),
    }


def main() -> int:
    from libredgetpu_ros.fixtures import fixture

    return long_run("long fuzz run of the TpuLang MLIR and npz readers", lambda names: targets(fixture),
                    cases=100_000, time_limit_s=5.0, memory_limit_mb=1024)


if __name__ == "__main__":
    sys.exit(main())
