"""Test fixtures for ``.mgk`` files, made by the tests themselves.

``build_shared_object`` assembles and links a real MIPS32 shared object with Debian's
``binutils-mipsel-linux-gnu`` (``.rodata`` holding layer names, decoy strings, and the scale area laid out
as in the public AEC sample: per layer a 128-word int run, a 128-word float run and a 64-byte scale record,
with near-records that must be refused; ``.data.rel.ro`` pointing at them). ``SyntheticMgk`` appends known
weights after it in the design seed's layouts, packed by the slow reference packers below (per-element
loops written from the seed's text, independent of the vectorised code under test). ``patch_elf32`` is our
own small builder for what the toolchain will not produce: bad header fields, truncated or misplaced
section tables.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

AS, LD, STRIP, READELF = (f"mipsel-linux-gnu-{tool}" for tool in ("as", "ld", "strip", "readelf"))
GATES = ("weight_ir", "weight_iz", "weight_in", "weight_hr", "weight_hz", "weight_hn")


def missing_toolchain() -> str | None:
    """None when the MIPS toolchain is on PATH, else the message a test fails with."""
    missing = [tool for tool in (AS, LD, STRIP, READELF) if shutil.which(tool) is None]
    if not missing:
        return None
    return (f"{', '.join(missing)} not found: the .mgk tests build their fixtures with the real MIPS "
            "toolchain; install it with `apt-get install binutils-mipsel-linux-gnu` (.ci/run does)")


def _f32_word(value: float) -> str:
    return f"0x{struct.unpack('<I', struct.pack('<f', value))[0]:08x}"


@dataclass(frozen=True)
class Record:
    """One 64-byte scale record as the AEC sample stores it."""

    input_scale: float
    weight_scale: float
    input_zero_point: int
    weight_zero_point: int
    ids: tuple[int, int, int, int]

    def words(self) -> list[str]:
        ints = [self.input_zero_point] * 2 + [self.weight_zero_point] * 2 + list(self.ids) + [-1, -1, -1, 0]
        return ([_f32_word(self.input_scale)] * 2 + [_f32_word(self.weight_scale)] * 2
                + [f"0x{v & 0xFFFFFFFF:08x}" for v in ints])


def _near(scales: tuple[float, ...] = (0.02, 0.02, 0.05, 0.05), zero_points: tuple[int, ...] = (0, 0, 0, 0),
          ids: tuple[int, ...] = (1, 2, 3, 4)) -> list[str]:
    return ([_f32_word(v) for v in scales] + [f"0x{v & 0xFFFFFFFF:08x}" for v in (*zero_points, *ids)])


# Near-records the finder must refuse: each breaks one field of an otherwise valid record.
NEAR_RECORDS = {
    "nan input scale": ["0x7fc00000"] * 2 + _near()[2:],
    "zero point 300": _near(zero_points=(300, 300, 0, 0)),
    "scales not paired": _near(scales=(0.02, 0.05, 0.02, 0.05)),
    "zero points not paired": _near(zero_points=(0, -6, 0, 0)),
    "id 70000": _near(ids=(1, 70000, 3, 4)),
    "negative weight scale": _near(scales=(0.02, 0.02, -0.05, -0.05)),
    "negative id": _near(ids=(1, -1, 3, 4)),
    "huge scale": _near(scales=(0.02, 0.02, 1e6, 1e6)),
}


def _scale_area(records: list[Record]) -> list[str]:
    """Per record, as in the AEC sample: 128 x int32, 128 x float32 (per-channel arrays holding one value
    each), the 64-byte record, then small-int structure words; near-records and an old-style [a, a, b, b]
    group before them."""
    lines = [".align 4", "near_records:"]
    for words in NEAR_RECORDS.values():
        lines.append(".word " + ", ".join(words + ["0xffffffff"] * 4))
    lines.append(".word " + ", ".join([_f32_word(0.5)] * 2 + [_f32_word(0.25)] * 2 + [_f32_word(1.5)] * 12))
    lines += [".align 4", "scales:"]
    for k, record in enumerate(records):
        lines.append(f".fill 128, 4, {20 + 7 * k}")
        lines.append(f".fill 128, 4, {_f32_word(10.0 + 3.5 * k)}")
        lines.append(".word " + ", ".join(record.words()))
        lines.append(".word 1, 4, 1, 128, 32, 1, 4, 1, 64, 32, 0x40000000, 0x3f800000, 74")
    return lines


def build_shared_object(workdir: Path, strings: list[str], records: list[Record],
                        endian: str = "EL", strip: bool = True) -> bytes:
    """Assemble + link (``ld -shared``) a MIPS32 object whose .rodata holds ``strings`` and the records."""
    decoys = ["conv2d_int8_param_init", "gru_param_init", "magik_set_tensor", "AAAAAAAABBBBBBBB",
              "xlayer_9_QuantizeFeature", "layer_x_QuantizeFeature"]
    lines = [".text", ".globl mgk_forward", ".type mgk_forward, @function", "mgk_forward:", "jr $ra", "nop",
             ".section .rodata", ".align 2"]
    for k, text in enumerate(decoys[:3] + strings + decoys[3:]):
        lines += [f".Lstr{k}:", f'.asciz "{text}"']
    lines += _scale_area(records)
    lines += [".word 0", ".section .data.rel.ro,\"aw\"", ".align 2", ".word scales", ".word .Lstr3", ""]
    src, obj, out = workdir / "model.s", workdir / "model.o", workdir / "model.so"
    src.write_text("\n".join(lines))
    subprocess.run([AS, f"-{endian}", "-mabi=32", "-march=mips32r2", "-o", str(obj), str(src)], check=True,
                   capture_output=True)
    subprocess.run([LD, f"-{endian}", "-shared", "-o", str(out), str(obj)], check=True, capture_output=True)
    if strip:
        subprocess.run([STRIP, str(out)], check=True, capture_output=True)
    return out.read_bytes()


def readelf_sections(path: Path) -> list[str]:
    """Section names as binutils' readelf lists them (an independent view for the tests)."""
    text = subprocess.run([READELF, "-W", "-S", str(path)], check=True, capture_output=True, text=True).stdout
    names = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and "]" in line and not line.startswith("[Nr]"):
            rest = line.split("]", 1)[1].split()
            names.append(rest[0] if rest and rest[0] != "NULL" else "")
    return names


# --- reference packers: one element at a time, straight from the seed's text -------------------------

def reference_pack_nmhwsoib2(w: np.ndarray) -> bytes:
    """[N_OFP, M_IFP, KH, KW, 32 out, 32 in] int8, zero-padded channels, written with plain loops."""
    o, i, kh, kw = w.shape
    n, m = -(-o // 32), -(-i // 32)
    out = bytearray(n * m * kh * kw * 1024)
    pos = 0
    for a in range(n):
        for b in range(m):
            for y in range(kh):
                for x in range(kw):
                    for oo in range(32):
                        for ii in range(32):
                            oc, ic = a * 32 + oo, b * 32 + ii
                            if oc < o and ic < i:
                                out[pos] = int(w[oc, ic, y, x]) & 0xFF
                            pos += 1
    return bytes(out)


def reference_pack_gru(gates: dict[str, np.ndarray], bidirectional: bool) -> bytes:
    if bidirectional:
        order = list(GATES) + [f"{g}_reverse" for g in GATES]
        return b"".join(gates[g].astype(np.int8).tobytes() for g in order) + gates["bias_raw"].tobytes()
    return gates["weight_ih"].astype(np.int8).tobytes() + gates["weight_hh"].astype(np.int8).tobytes()


@dataclass
class Layer:
    layer_id: int
    type: str                      # Feature | BatchNorm | GRU
    layout: str                    # nmhwsoib2 | gru_bidirectional | gru_unidirectional | raw
    weights: object                # OIHW int8 array, gate dict, or raw int8 array
    scale: Record

    @property
    def name(self) -> str:
        return f"layer_{self.layer_id}_Quantize{self.type}"

    def packed(self) -> bytes:
        if self.layout == "nmhwsoib2":
            return reference_pack_nmhwsoib2(self.weights)
        if self.layout.startswith("gru"):
            return reference_pack_gru(self.weights, self.layout == "gru_bidirectional")
        return self.weights.tobytes()


def random_layers(rng: np.random.Generator) -> list[Layer]:
    """A small model: convolutions with channel counts off the 32 grid, both GRU kinds, a raw BN blob."""
    count = iter(range(6))

    def scale() -> Record:
        k = next(count)
        a, b = (float(np.float32(v)) for v in rng.uniform(0.001, 0.2, 2))
        zp_in, zp_w = (int(v) for v in rng.integers(-135, 1, 2))
        return Record(a, b, zp_in, zp_w, (2 * k + 1, 76 - 3 * k, 19 - 2 * k, 23 + 2 * k))

    def gru(bidirectional: bool) -> dict[str, np.ndarray]:
        if bidirectional:
            gates = {g: rng.integers(-128, 128, (32, 32), dtype=np.int8)
                     for g in list(GATES) + [f"{g}_reverse" for g in GATES]}
            gates["bias_raw"] = rng.integers(-128, 128, 576, dtype=np.int8)
            return gates
        return {k: rng.integers(-128, 128, (64, 32), dtype=np.int8) for k in ("weight_ih", "weight_hh")}

    return [
        Layer(4, "Feature", "nmhwsoib2", rng.integers(-128, 128, (40, 3, 3, 3), dtype=np.int8), scale()),
        Layer(46, "GRU", "gru_bidirectional", gru(True), scale()),
        Layer(16, "Feature", "nmhwsoib2", rng.integers(-128, 128, (64, 32, 1, 1), dtype=np.int8), scale()),
        Layer(37, "GRU", "gru_unidirectional", gru(False), scale()),
        Layer(8, "BatchNorm", "raw", rng.integers(-128, 128, 448, dtype=np.int8), scale()),
        Layer(22, "Feature", "nmhwsoib2", rng.integers(-128, 128, (17, 70, 5, 5), dtype=np.int8), scale()),
    ]


# The AEC sample's 1,792-byte prefix: per 256-byte block, (position, 8 bytes in hex) of its non-zero words.
AEC_PREFIX_WORDS = (
    ((0, "0b00000000000000"), (8, "0d00000000000000")),
    ((0, "0d00000000000000"), (8, "0f00000000000000")),
    ((0, "0400000000000000"), (8, "0900000000000000")),
    ((0, "abaaaaaaaaaaaaaa"), (8, "acaaaaaaaaaaaaaa")),
    ((0, "9c60ffff10edffff"), (128, "0e8585391d353a3b")),
    (), (),
)


@dataclass
class SyntheticMgk:
    """A toolchain-built shared object + appended weights, with the offset table that describes them."""

    layers: list[Layer]
    gap: int = 1792                # bytes between the ELF data and the weight region (as in the AEC sample)
    header_blocks: bool = False    # gap = the AEC sample's sparse 256-byte blocks (else random bytes)
    seed: int = 0
    so_bytes: bytes = b""
    data: bytes = b""
    table: dict = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)   # absolute file offsets

    def build(self, workdir: Path, endian: str = "EL") -> SyntheticMgk:
        rng = np.random.default_rng(self.seed)
        self.so_bytes = build_shared_object(workdir, [layer.name for layer in self.layers],
                                            [layer.scale for layer in self.layers], endian=endian)
        if self.header_blocks:
            blob = bytearray(self.gap)
            for k, words in enumerate(AEC_PREFIX_WORDS):
                for at, text in words:
                    blob[256 * k + at:256 * k + at + 8] = bytes.fromhex(text)
        else:
            blob = bytearray(rng.integers(0, 256, self.gap, dtype=np.uint8).tobytes())   # not zeros: no help
        base = len(self.so_bytes) + self.gap
        entries = []
        for k, layer in enumerate(self.layers):
            blob += rng.integers(0, 256, (-len(blob)) % 64 + 64 * (k % 2), dtype=np.uint8).tobytes()
            relative = len(blob) - self.gap
            self.offsets[layer.name] = base + relative
            packed = layer.packed()
            blob += packed
            entry = {"name": f"layer_{layer.layer_id}_{layer.layout}", "offset": relative,
                     "layout": layer.layout, "scale_record": k}
            if layer.layout == "nmhwsoib2":
                entry["shape"] = list(layer.weights.shape)
            elif layer.layout == "raw":
                entry["size"] = len(packed)
            entries.append(entry)
        blob += rng.integers(0, 256, 100, dtype=np.uint8).tobytes()   # trailing bytes no layer claims
        self.data = self.so_bytes + bytes(blob)
        self.table = {"weights_base": {"after_elf": self.gap}, "layers": entries}
        return self


# --- our own builder for what the toolchain will not make ---------------------------------------------

_EHDR32 = {"e_type": (16, "H"), "e_machine": (18, "H"), "e_phoff": (28, "I"), "e_shoff": (32, "I"),
           "e_phentsize": (42, "H"), "e_phnum": (44, "H"), "e_shentsize": (46, "H"), "e_shnum": (48, "H"),
           "e_shstrndx": (50, "H")}


def elf32_field(data: bytes, name: str) -> int:
    offset, fmt = _EHDR32[name]
    return struct.unpack_from("<" + fmt, data, offset)[0]


def patch_elf32(data: bytes, **fields: int) -> bytes:
    """Return ``data`` with ELF32 LE header fields replaced (``e_machine=3``, ``e_shoff=...``)."""
    out = bytearray(data)
    for name, value in fields.items():
        offset, fmt = _EHDR32[name]
        struct.pack_into("<" + fmt, out, offset, value)
    return bytes(out)


def patch_section(data: bytes, index: int, **fields: int) -> bytes:
    """Replace fields of section header ``index`` (sh_offset, sh_size, sh_name)."""
    where = {"sh_name": 0, "sh_type": 4, "sh_offset": 16, "sh_size": 20}
    out = bytearray(data)
    base = elf32_field(data, "e_shoff") + 40 * index
    for name, value in fields.items():
        struct.pack_into("<I", out, base + where[name], value)
    return bytes(out)
