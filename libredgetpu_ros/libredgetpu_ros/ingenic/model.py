"""An ``.mgk`` model: ELF view + .rodata findings + weight region + layer map, and weight extraction.

``load_mgk(path | bytes, table=None)`` is the entry point. The file tells the layer names and types, the
64-byte scale records and per-channel runs in ``.rodata``, and where the appended weight region starts
(after a sparse header prefix when there is one); per-layer offsets, sizes, shapes and which scale record
a layer uses come from a user's :class:`OffsetTable` (the file does not record them in any place we decode).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from libredgetpu_ros.errors import ConfigError, ModelFormatError
from libredgetpu_ros.ingenic import layouts
from libredgetpu_ros.ingenic.elf import ElfView, read_elf
from libredgetpu_ros.ingenic.enums import EnumObservation, fit_enum_tables
from libredgetpu_ros.ingenic.regionstats import region_stats
from libredgetpu_ros.ingenic.rodata import (
    ChannelRun,
    LayerName,
    ScaleRecord,
    find_channel_runs,
    find_layer_names,
    find_scale_records,
)
from libredgetpu_ros.ingenic.table import OffsetTable
from libredgetpu_ros.ingenic.tail import Prefix, find_prefix

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
    scale_record: int | None        # index into MgkModel.scale_records
    scale_source: str | None        # "table": the only evidence we have for a pairing
    source: str                     # "file", "table" or "file+table"

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass
class MgkModel:
    source: str
    data: bytes = field(repr=False)
    elf: ElfView
    layer_names: list[LayerName]
    scale_records: list[ScaleRecord]
    channel_runs: list[ChannelRun]
    prefix: Prefix                  # sparse header blocks between the ELF data and the region (may be empty)
    weights_offset: int
    weights_base_source: str        # "table", "after prefix" or "end of ELF data"
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
        """Arrays to save (``name`` or ``name.gate``, ``name.weight_scale``) and notes on what stayed raw.

        Every scale record is saved as found (``__scale_records__``: input and weight scale per record,
        ``__scale_record_zero_points__``, ``__scale_record_ids__``); a layer gets ``name.weight_scale``
        only when the table pairs it with a record.
        """
        if layout not in EXTRACT_LAYOUTS:
            raise ConfigError(f"layout must be one of {', '.join(EXTRACT_LAYOUTS)}, got {layout!r}")
        records = self.scale_records
        arrays: dict[str, np.ndarray] = {
            "__scale_records__": np.array([(r.input_scale, r.weight_scale) for r in records],
                                          np.float32).reshape(-1, 2),
            "__scale_record_zero_points__": np.array(
                [(r.input_zero_point, r.weight_zero_point) for r in records], np.int32).reshape(-1, 2),
            "__scale_record_ids__": np.array([r.ids for r in records], np.int32).reshape(-1, 4)}
        if self.prefix.size:
            arrays["__header_prefix__"] = np.frombuffer(self.data, np.uint8, count=self.prefix.size,
                                                        offset=self.prefix.offset)
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
            if layer.scale_record is not None:
                arrays[f"{layer.name}.weight_scale"] = np.float32(records[layer.scale_record].weight_scale)
        if records and not any(layer.scale_record is not None for layer in self.layers):
            notes.append(f"{len(records)} scale records saved as found; no layer is paired with one "
                         "(the file does not say which; a table's scale_record does)")
        return arrays, notes

    def describe(self) -> dict:
        """Everything ``mgk inspect`` shows, JSON-ready."""
        region = np.frombuffer(self.data, np.uint8, offset=self.weights_offset)
        return {
            "source": self.source,
            "file_size": len(self.data),
            "elf": {
                **self.elf.identity,
                "type": self.elf.e_type,
                "sections": [{"index": s.index, "name": s.name, "type": s.type, "offset": s.offset,
                              "size": s.size, "addr": s.addr} for s in self.elf.sections],
                "section_table": {"offset": self.elf.section_table[0], "size": self.elf.section_table[1]},
                "program_table": {"offset": self.elf.program_table[0], "size": self.elf.program_table[1]},
                "end_of_elf_data": self.elf.tail_offset,
            },
            "header_prefix": self.prefix.as_dict(),
            "weight_region": {"offset": self.weights_offset, "size": self.weights_size,
                              "gap_after_elf": self.weights_offset - self.elf.tail_offset,
                              "start_from": self.weights_base_source, "stats": region_stats(region)},
            "layers": [{**layer.as_dict(), "stats": None if layer.offset is None else region_stats(
                np.frombuffer(self.data, np.uint8, count=layer.size, offset=layer.offset))}
                for layer in self.layers],
            "scale_records": [r.as_dict() for r in self.scale_records],
            "channel_runs": [r.as_dict() for r in self.channel_runs],
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


def _merge(names: list[LayerName], records: list[ScaleRecord], table: OffsetTable | None, base: int,
           region: int, source: str) -> list[LayerEntry]:
    by_name = {n.name: n for n in names}
    by_id = {n.layer_id: n for n in names}
    entries, used = [], set()
    for t in (table.layers if table else ()):
        found = by_name.get(t.name) or (by_id.get(t.layer_id) if t.layer_id is not None else None)
        if t.offset + t.size > region:
            raise ModelFormatError(f"{source}: layer {t.name}: weight bytes [{t.offset}, "
                                   f"{t.offset + t.size}) of the region end past the end of the file "
                                   f"(region {region} bytes at offset {base})")
        if t.scale_record is not None and t.scale_record >= len(records):
            raise ConfigError(f"{table.source}: layer {t.name}: scale_record {t.scale_record}, the file has "
                              f"{len(records)} scale records")
        type_ = found.type if found else None
        layout = _guess_layout(t.size, type_) if t.layout == "auto" else t.layout
        if found:
            if found.name in used:
                raise ConfigError(f"{table.source}: layer {t.name} and an earlier entry both match the "
                                  f"file's {found.name} (by name or id {found.layer_id})")
            used.add(found.name)
        entries.append(LayerEntry(
            name=found.name if found else t.name, layer_id=found.layer_id if found else t.layer_id,
            type=type_, offset=base + t.offset, size=t.size, layout=layout, shape=t.shape,
            shape_guess=None if t.shape else _shape_guess(layout, t.size), scale_record=t.scale_record,
            scale_source=None if t.scale_record is None else "table",
            source="file+table" if found else "table"))
    for n in names:
        if n.name not in used:
            entries.append(LayerEntry(
                name=n.name, layer_id=n.layer_id, type=n.type, offset=None, size=None, layout=None,
                shape=None, shape_guess=None, scale_record=None, scale_source=None, source="file"))
    return entries


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
    from libredgetpu_ros.paths import read_regular

    path = Path(model)  # a regular file within MAX_FILE_BYTES, checked on the opened file
    return read_regular(path, "model", MAX_FILE_BYTES, ModelFormatError), str(path)


def load_mgk(model: str | Path | bytes | bytearray | memoryview,
             table: OffsetTable | None = None) -> MgkModel:
    """Read an ``.mgk``; any malformed input raises :class:`ModelFormatError` (a bad table: ConfigError)."""
    data, source = _read_bytes(model)
    elf = read_elf(data, source)
    rodata = elf.section(".rodata")
    chunk = data[rodata.offset:rodata.offset + rodata.size] if rodata and rodata.type != "SHT_NOBITS" else b""
    where = rodata.offset if rodata else 0
    names = find_layer_names(chunk, where)
    records = find_scale_records(chunk, where)
    prefix = find_prefix(data, elf.tail_offset)
    base, base_source = prefix.offset + prefix.size, "after prefix" if prefix.size else "end of ELF data"
    if table and table.base_offset is not None:
        base, base_source = table.base_offset, "table"
    elif table and table.base_after_elf is not None:
        base, base_source = elf.tail_offset + table.base_after_elf, "table"
    if base > len(data):
        raise ModelFormatError(f"{source}: weight region offset {base} is past the end of the file "
                               f"({len(data)} bytes)")
    layers = _merge(names, records, table, base, len(data) - base, source)
    enum_fit = fit_enum_tables(_observations(table, layers))
    return MgkModel(source=source, data=data, elf=elf, layer_names=names, scale_records=records,
                    channel_runs=find_channel_runs(chunk, where), prefix=prefix, weights_offset=base,
                    weights_base_source=base_source, layers=layers, enum_fit=enum_fit)
