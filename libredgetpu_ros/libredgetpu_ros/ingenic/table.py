"""The user's offset table (YAML): where each layer's weights sit when the ``.mgk`` itself cannot tell.

The file names its layers and holds the scales, but where each layer's bytes start in the appended weight
region and what shape they have lives in code we do not decode. A table like the design seed's AEC list
fills that in::

    weights_base:            # optional; default: first byte after the ELF data and any header prefix
      after_elf: 1792        #   bytes after the end of the ELF data, or
      # offset: 0x79294      #   an absolute file offset
    layers:
      - name: layer_46_gru_bidir      # matched to the file's layer_46_Quantize... by its id
        offset: 0x0                   # from the weight region's start
        layout: gru_bidirectional     # nmhwsoib2 | gru_bidirectional | gru_unidirectional | raw | auto
      - name: layer_4_QuantizeFeature
        offset: 0x12a00
        layout: nmhwsoib2
        shape: [64, 2, 3, 3]          # real (unpadded) O, I, KH, KW; size follows from it
        scale_record: 3               # optional: which .rodata scale record (index) this layer uses
        format_value: 3               # optional: DataFormat / DataType values seen for this layer,
        dtype_value: 12               #   checked against both enum tables
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.ingenic.layouts import BLOCK_BYTES, GRU_BIDIR_BYTES, GRU_UNIDIR_BYTES, nmhwsoib2_size

LAYOUTS = ("auto", "nmhwsoib2", "gru_bidirectional", "gru_unidirectional", "raw")
FIXED_SIZES = {"gru_bidirectional": GRU_BIDIR_BYTES, "gru_unidirectional": GRU_UNIDIR_BYTES}
MAX_TABLE_BYTES = 1 << 20
MAX_LAYERS = 10_000
MAX_INT = 1 << 40
_LAYER_ID = re.compile(r"layer_([0-9]{1,9})_")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,127}")


@dataclass(frozen=True)
class TableLayer:
    name: str
    layer_id: int | None
    offset: int                                 # from the weight region's start
    size: int
    layout: str
    shape: tuple[int, int, int, int] | None     # nmhwsoib2 only
    scale_record: int | None
    format_value: int | None
    dtype_value: int | None


@dataclass(frozen=True)
class OffsetTable:
    source: str
    base_offset: int | None        # absolute file offset of the weight region
    base_after_elf: int | None     # or: bytes after the end of the ELF data
    layers: tuple[TableLayer, ...]


def _int(value: object, where: str, minimum: int = 0) -> int:
    # bool is an int subclass in Python; "true" in a size field is a typo, not 1.
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value < MAX_INT:
        raise ConfigError(f"{where} must be an integer in [{minimum}, 2**40), got {value!r}")
    return value


def _optional_int(entry: dict, key: str, where: str, minimum: int = 0) -> int | None:
    return None if entry.get(key) is None else _int(entry[key], f"{where}.{key}", minimum)


def _layer(entry: object, index: int, source: str) -> TableLayer:
    where = f"{source}: layers[{index}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a mapping, got {type(entry).__name__}")
    unknown = set(entry) - {"name", "layer_id", "offset", "size", "layout", "shape", "scale_record",
                            "format_value", "dtype_value"}
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(map(str, unknown))}")
    name = entry.get("name")
    # Names become .npz member names: no path separators or other surprises.
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"{where}.name must be 1-128 of A-Z a-z 0-9 _ - (not starting with -), "
                          f"got {name!r}")
    where = f"{source}: layer {name}"
    layer_id = _optional_int(entry, "layer_id", where)
    if layer_id is None and (m := _LAYER_ID.match(name)):
        layer_id = int(m.group(1))
    layout = entry.get("layout", "auto")
    if layout not in LAYOUTS:
        raise ConfigError(f"{where}.layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    shape = entry.get("shape")
    if shape is not None:
        if layout not in ("nmhwsoib2", "auto") or not isinstance(shape, list) or len(shape) != 4:
            raise ConfigError(f"{where}.shape must be [O, I, KH, KW] of an nmhwsoib2 layer, got {shape!r}")
        shape = tuple(_int(v, f"{where}.shape", 1) for v in shape)
        if max(shape) > 1 << 16:
            raise ConfigError(f"{where}.shape {shape} is implausibly large")
        layout = "nmhwsoib2"
    size = _optional_int(entry, "size", where, 1)
    implied = nmhwsoib2_size(*shape) if shape else FIXED_SIZES.get(layout)
    if size is None:
        if implied is None:
            raise ConfigError(f"{where}: give size (or shape for nmhwsoib2)")
        size = implied
    elif layout == "nmhwsoib2" and size % BLOCK_BYTES:
        raise ConfigError(f"{where}: size {size} of an nmhwsoib2 layer is not a multiple of {BLOCK_BYTES}")
    elif implied is not None and size != implied:
        raise ConfigError(f"{where}: size {size} does not match its layout {layout} "
                          f"{'shape ' + str(shape) + ' ' if shape else ''}({implied} bytes)")
    return TableLayer(name=name, layer_id=layer_id, offset=_int(entry.get("offset"), f"{where}.offset"),
                      size=size, layout=layout, shape=shape,
                      scale_record=_optional_int(entry, "scale_record", where),
                      format_value=_optional_int(entry, "format_value", where, -1),
                      dtype_value=_optional_int(entry, "dtype_value", where, -1))


def parse_table(doc: object, source: str = "<table>") -> OffsetTable:
    """Validate a loaded YAML document; every problem is a :class:`ConfigError` naming the field."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: an offset table is a mapping with 'layers', got {type(doc).__name__}")
    unknown = set(doc) - {"weights_base", "layers"}
    if unknown:
        raise ConfigError(f"{source}: unknown keys {sorted(map(str, unknown))}")
    base = doc.get("weights_base") or {}
    if not isinstance(base, dict) or set(base) - {"offset", "after_elf"} or len(base) > 1:
        raise ConfigError(f"{source}: weights_base must be {{offset: N}} or {{after_elf: N}}, got {base!r}")
    layers = doc.get("layers")
    if not isinstance(layers, list) or not layers or len(layers) > MAX_LAYERS:
        raise ConfigError(f"{source}: layers must be a list of 1..{MAX_LAYERS} entries")
    parsed = tuple(_layer(entry, k, source) for k, entry in enumerate(layers))
    names = [layer.name for layer in parsed]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: layer names repeat: {sorted({n for n in names if names.count(n) > 1})}")
    return OffsetTable(source=source, layers=parsed,
                       base_offset=_optional_int(base, "offset", f"{source}: weights_base"),
                       base_after_elf=_optional_int(base, "after_elf", f"{source}: weights_base"))


def load_table(path: str | Path) -> OffsetTable:
    from libredgetpu_ros.errors import TextDataError
    from libredgetpu_ros.textdata import load_yaml_file

    try:  # size, UTF-8, nesting depth and alias expansion bounded (textdata.py)
        doc = load_yaml_file(path, "offset table", max_bytes=MAX_TABLE_BYTES, max_depth=16)
    except TextDataError as exc:
        raise ConfigError(f"cannot read it as YAML: {exc}") from None
    return parse_table(doc, str(path))
