"""An ``.mgk`` model: ELF view + .rodata findings + weight region + layer map, and weight extraction.

``load_mgk(path | bytes, table=None)`` is the entry point. The file tells the layer names and types, the
scale groups and where the appended weight region starts; per-layer offsets, sizes and shapes come from
a user's :class:`OffsetTable` when given (the file does not record them in any place we decode).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from libredgetpu_ros.errors import ConfigError, ModelFormatError, not_a_file
from libredgetpu_ros.ingenic import layouts
from libredgetpu_ros.ingenic.elf import ElfView, read_elf
from libredgetpu_ros.ingenic.enums import EnumObservation, fit_enum_tables
from libredgetpu_ros.ingenic.rodata import LayerName, ScaleGroup, find_layer_names, find_scale_groups
from libredgetpu_ros.ingenic.table import OffsetTable, TableLayer
from libredgetpu_ros.ingenic.tail import TailGuess, guess_dense_start

MAX_FILE_BYTES = 1 << 30
EXTRACT_LAYOUTS = ("oihw", "raw")


@dataclass(frozen=True)
class LayerEntry:
    """One row of the layer map. ``offset`` is a file offset; None when neither file nor table tells."""

    name: str
    layer_id: int | None
    type: str | None                # from the file's "Quantize{Type}" name
    offset: int | None
    size: int | None
    layout: str | None              # nmhwsoib2 | gru_bidirectional | gru_unidirectional | raw
    shape: tuple[int, ...] | None   # given by the table (exact)
    shape_guess: str | None         # what the size and layout allow, when no shape was given
    scale_group: int | None
    scale_source: str | None        # "table" | "order" (i-th name <-> i-th group: a hypothesis)
    source: str                     # "file", "table" or "file+table"

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass
class MgkModel:
    source: str
    data: bytes = field(repr=False)
    elf: ElfView
    layer_names: list[LayerName]
    scale_groups: list[ScaleGroup]
    weights_offset: int
    layers: list[LayerEntry]
    enum_fit: dict

    @property
    def weights_size(self) -> int:
        return len(self.data) - self.weights_offset

    def layer_bytes(self, layer: LayerEntry) -> np.ndarray:
        """The layer's bytes as an int8 view of the file (offsets were checked at load)."""
        if layer.offset is None or layer.size is None:
            raise ConfigError(f"{self.source}: layer {layer.name} has no offset/size: give an offset table")
        return np.frombuffer(self.data, np.int8, count=layer.size, offset=layer.offset)

    def extract(self, layout: str = "oihw") -> tuple[dict[str, np.ndarray], list[str]]:
        """Arrays to save (``name`` or ``name.gate``, ``name.weight_scale``) and notes on what stayed raw."""
        if layout not in EXTRACT_LAYOUTS:
            raise ConfigError(f"layout must be one of {', '.join(EXTRACT_LAYOUTS)}, got {layout!r}")
        arrays: dict[str, np.ndarray] = {
            "__scale_groups__": np.array([g.values for g in self.scale_groups], np.float32).reshape(-1, 4)}
        notes = []
        placed = [layer for layer in self.layers if layer.offset is not None]
        if not placed:
            arrays["__weights_region__"] = np.frombuffer(self.data, np.int8, offset=self.weights_offset)
            notes.append("no layer offsets known (give --table): saved the whole weight region raw")
        for layer in placed:
            raw = self.layer_bytes(layer)
            if layout == "raw" or layer.layout == "raw":
                arrays[layer.name] = raw.copy()
            elif layer.layout == "nmhwsoib2" and layer.shape is not None:
                arrays[layer.name] = layouts.nmhwsoib2_to_oihw(raw, *layer.shape)
            elif layer.layout in ("gru_bidirectional", "gru_unidirectional"):
                gates = layouts.gru_blocks_to_gates(raw, layer.layout == "gru_bidirectional")
                arrays.update({f"{layer.name}.{gate}": value for gate, value in gates.items()})
            else:
                arrays[layer.name] = raw.copy()
                notes.append(f"{layer.name}: no shape for {layer.layout}, saved raw ({layer.shape_guess})")
            if layer.scale_group is not None:
                group = self.scale_groups[layer.scale_group]
                arrays[f"{layer.name}.weight_scale"] = np.float32(group.weight_scale)
        return arrays, notes

    def dense_start_guess(self) -> TailGuess:
        """Where dense weights seem to start after the ELF data (a reported hypothesis; see tail.py)."""
        return guess_dense_start(self.data, self.elf.tail_offset)

    def describe(self) -> dict:
        """Everything ``mgk inspect`` shows, JSON-ready."""
        return {
            "source": self.source,
            "file_size": len(self.data),
            "elf": {
                "type": self.elf.e_type,
                "sections": [{"index": s.index, "name": s.name, "type": s.type, "offset": s.offset,
                              "size": s.size, "addr": s.addr} for s in self.elf.sections],
                "section_table": {"offset": self.elf.section_table[0], "size": self.elf.section_table[1]},
                "program_table": {"offset": self.elf.program_table[0], "size": self.elf.program_table[1]},
                "end_of_elf_data": self.elf.tail_offset,
            },
            "weight_region": {"offset": self.weights_offset, "size": self.weights_size,
                              "gap_after_elf": self.weights_offset - self.elf.tail_offset,
                              "dense_start_guess": self.dense_start_guess().as_dict()},
            "layers": [layer.as_dict() for layer in self.layers],
            "scale_groups": [{"index": g.index, "offset": g.offset, "values": list(g.values)}
                             for g in self.scale_groups],
            "enum_tables": self.enum_fit,
        }


def _guess_layout(size: int, type_: str | None) -> str:
    if size == layouts.GRU_BIDIR_BYTES:
        return "gru_bidirectional"
    if size == layouts.GRU_UNIDIR_BYTES and type_ and type_.upper() == "GRU":
        return "gru_unidirectional"
    return "nmhwsoib2" if size % layouts.BLOCK_BYTES == 0 else "raw"


def _shape_guess(layout: str | None, size: int | None) -> str | None:
    if layout == "gru_bidirectional":
        return "12 x (32, 32) gates + 576 raw bytes"
    if layout == "gru_unidirectional":
        return "weight_ih (64, 32), weight_hh (64, 32)"
    if layout == "nmhwsoib2" and size:
        blocks = size // layouts.BLOCK_BYTES
        k = next(k for k in (5, 3, 1) if blocks % (k * k) == 0)
        return (f"{blocks} blocks of 32x32, e.g. O,I <= ({32 * blocks // (k * k)}, 32) with a {k}x{k} kernel "
                "(padded; give shape in the table)")
    if layout == "raw" and size:
        return f"({size},) bytes"
    return None


def _merge(names: list[LayerName], groups: list[ScaleGroup], table: OffsetTable | None, base: int,
           region: int, source: str) -> list[LayerEntry]:
    by_name = {n.name: n for n in names}
    by_id = {n.layer_id: n for n in names}
    # Without a table entry saying so, the i-th layer name uses the i-th scale group only when the
    # counts agree (a hypothesis, reported as scale_source "order").
    order = {n.name: k for k, n in enumerate(names)} if len(names) == len(groups) else {}
    entries, used = [], set()
    for t in (table.layers if table else ()):
        found = by_name.get(t.name) or (by_id.get(t.layer_id) if t.layer_id is not None else None)
        if t.offset + t.size > region:
            raise ModelFormatError(f"{source}: layer {t.name}: weight bytes [{t.offset}, "
                                   f"{t.offset + t.size}) of the region end past the end of the file "
                                   f"(region {region} bytes at offset {base})")
        if t.scale_group is not None and t.scale_group >= len(groups):
            raise ConfigError(f"{table.source}: layer {t.name}: scale_group {t.scale_group}, the file has "
                              f"{len(groups)} scale groups")
        type_ = found.type if found else None
        layout = _guess_layout(t.size, type_) if t.layout == "auto" else t.layout
        if found:
            if found.name in used:
                raise ConfigError(f"{table.source}: layer {t.name} and an earlier entry both match the "
                                  f"file's {found.name} (by name or id {found.layer_id})")
            used.add(found.name)
        group, how = _scale(t, found, order)
        entries.append(LayerEntry(
            name=found.name if found else t.name, layer_id=found.layer_id if found else t.layer_id,
            type=type_, offset=base + t.offset, size=t.size, layout=layout, shape=t.shape,
            shape_guess=None if t.shape else _shape_guess(layout, t.size), scale_group=group,
            scale_source=how, source="file+table" if found else "table"))
    for n in names:
        if n.name not in used:
            group = order.get(n.name)
            entries.append(LayerEntry(
                name=n.name, layer_id=n.layer_id, type=n.type, offset=None, size=None, layout=None,
                shape=None, shape_guess=None, scale_group=group,
                scale_source="order" if group is not None else None, source="file"))
    return entries


def _scale(t: TableLayer, found: LayerName | None, order: dict[str, int]) -> tuple[int | None, str | None]:
    if t.scale_group is not None:
        return t.scale_group, "table"
    if found and found.name in order:
        return order[found.name], "order"
    return None, None


def _observations(table: OffsetTable | None, layers: list[LayerEntry]) -> list[EnumObservation]:
    """Enum values the table reports, paired with the name they should have (weights are int8)."""
    layout_names = {layer.name: layer.layout for layer in layers}
    obs = []
    for t in (table.layers if table else ()):
        layout = layout_names.get(t.name, t.layout)
        if t.format_value is not None and layout == "nmhwsoib2":
            obs.append(EnumObservation("format", "NMHWSOIB2", t.format_value, t.name))
        if t.dtype_value is not None:
            obs.append(EnumObservation("dtype", "INT8", t.dtype_value, t.name))
    return obs


def _read_bytes(model: str | Path | bytes | bytearray | memoryview) -> tuple[bytes, str]:
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), "<bytes>"
    path = Path(model)
    if not path.is_file():
        raise ModelFormatError(not_a_file("model", path))
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ModelFormatError(f"{path}: {path.stat().st_size} bytes; an .mgk over {MAX_FILE_BYTES} bytes "
                               "is refused")
    try:
        return path.read_bytes(), str(path)
    except OSError as exc:
        raise ModelFormatError(f"cannot read model {path}: {exc}") from exc


def load_mgk(model: str | Path | bytes | bytearray | memoryview,
             table: OffsetTable | None = None) -> MgkModel:
    """Read an ``.mgk``; any malformed input raises :class:`ModelFormatError` (a bad table: ConfigError)."""
    data, source = _read_bytes(model)
    elf = read_elf(data, source)
    rodata = elf.section(".rodata")
    chunk = data[rodata.offset:rodata.offset + rodata.size] if rodata and rodata.type != "SHT_NOBITS" else b""
    names = find_layer_names(chunk, rodata.offset if rodata else 0)
    groups = find_scale_groups(chunk, rodata.offset if rodata else 0)
    base = elf.tail_offset
    if table and table.base_offset is not None:
        base = table.base_offset
    elif table and table.base_after_elf is not None:
        base = elf.tail_offset + table.base_after_elf
    if base > len(data):
        raise ModelFormatError(f"{source}: weight region offset {base} is past the end of the file "
                               f"({len(data)} bytes)")
    layers = _merge(names, groups, table, base, len(data) - base, source)
    enum_fit = fit_enum_tables(_observations(table, layers))
    return MgkModel(source=source, data=data, elf=elf, layer_names=names, scale_groups=groups,
                    weights_offset=base, layers=layers, enum_fit=enum_fit)
