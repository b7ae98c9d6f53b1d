"""``libredgetpu-ros mgk``: look inside Ingenic Magik ``.mgk`` models and extract their weights.

``mgk inspect FILE [--json] [--table T.yaml]``: sections, weight region, layers, scale groups, enum tables.
``mgk extract FILE OUT.npz [--layout oihw|raw] [--table T.yaml]``: weights as int8 arrays (OIHW kernels,
named GRU gates) plus each layer's weight scale; OUT.npz is written to a temporary file and renamed, so a
failure never leaves a partial file nor replaces a good one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TABLE_HELP = "offset table YAML: layer offsets and shapes the file does not record (docs/ingenic.md)"
HELP = "inspect an Ingenic Magik .mgk model or extract its weights (OIHW / GRU gates) to .npz"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="mgk_command", metavar="ACTION", required=True)
    inspect = sub.add_parser("inspect", help="sections, weight region, layers, scale groups, enum tables")
    inspect.add_argument("file", type=Path, help="the .mgk file")
    inspect.add_argument("--table", type=Path, help=TABLE_HELP)
    inspect.add_argument("--json", action="store_true", help="print everything as JSON")
    extract = sub.add_parser("extract", help="write the weights to an .npz")
    extract.add_argument("file", type=Path, help="the .mgk file")
    extract.add_argument("out", type=Path, help="output .npz (written atomically)")
    extract.add_argument("--layout", choices=("oihw", "raw"), default="oihw",
                         help="oihw: NMHWSOIB2 to OIHW and GRUs to gates (default); raw: bytes as stored")
    extract.add_argument("--table", type=Path, help=TABLE_HELP)


def _load(args: argparse.Namespace):
    from libredgetpu_ros.ingenic import load_mgk, load_table

    return load_mgk(args.file, load_table(args.table) if args.table else None)


def _print_inspect(info: dict) -> None:
    elf = info["elf"]
    print(f"{info['source']}: {info['file_size']} bytes, {elf['type']}, {len(elf['sections'])} sections, "
          f"section table at {elf['section_table']['offset']} ({elf['section_table']['size']} bytes)")
    for s in elf["sections"]:
        print(f"  [{s['index']:2}] {s['name'] or '-':<18} {s['type']:<20} offset {s['offset']:>8} "
              f"size {s['size']:>8}")
    region = info["weight_region"]
    print(f"weight region: offset {region['offset']} (0x{region['offset']:x}), {region['size']} bytes, "
          f"{region['gap_after_elf']} bytes after the end of the ELF data")
    guess = region["dense_start_guess"]
    if guess["dense_offset"] is not None:
        print(f"  dense data starts at {guess['dense_offset']} "
              f"({guess['dense_offset'] - elf['end_of_elf_data']} bytes after the ELF data; a guess), "
              f"after {len(guess['header_blocks'])} sparse 256-byte header blocks")
    print(f"layers: {len(info['layers'])}")
    for layer in info["layers"]:
        where = (f"offset {layer['offset']} size {layer['size']}" if layer["offset"] is not None
                 else "offset unknown (give --table)")
        shape = layer["shape"] or layer["shape_guess"] or "-"
        group = "-" if layer["scale_group"] is None else f"{layer['scale_group']} ({layer['scale_source']})"
        print(f"  {layer['name']:<28} {layer['type'] or '?':<10} {where:<28} {layer['layout'] or '-':<19} "
              f"shape {shape}; scale group {group}")
    print(f"scale groups: {len(info['scale_groups'])}")
    for g in info["scale_groups"]:
        print(f"  [{g['index']}] offset {g['offset']}: " + ", ".join(f"{v:.6g}" for v in g["values"]))
    for table, fit in info["enum_tables"].items():
        print(f"enum table {table}: {fit['verdict']} ({fit['checked']} values checked)")
        for conflict in fit["conflicts"]:
            print(f"  {conflict}")


def _write_npz_atomically(out: Path, arrays: dict) -> int:
    """Save through atomicio (temporary beside ``out``, fsync, rename); returns the bytes written."""
    import numpy as np

    from libredgetpu_ros.atomicio import atomic_open

    with atomic_open(out) as handle:
        np.savez(handle, **arrays)
    return out.stat().st_size


def run(args: argparse.Namespace) -> int:
    model = _load(args)
    if args.mgk_command == "inspect":
        info = model.describe()
        if args.json:
            print(json.dumps(info, indent=2))
        else:
            _print_inspect(info)
        return 0
    arrays, notes = model.extract(args.layout)
    size = _write_npz_atomically(args.out, arrays)
    for note in notes:
        print(f"note: {note}")
    print(f"{args.out}: {len(arrays)} arrays, {size} bytes ({args.layout})")
    return 0
