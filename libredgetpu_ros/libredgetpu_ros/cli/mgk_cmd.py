"""``libredgetpu-ros mgk``: look inside Ingenic Magik ``.mgk`` models and extract their weights.

``mgk inspect FILE [--json] [--table T.yaml]``: ELF identity and sections, header prefix, weight region
(with byte statistics), layers, scale records, per-channel runs, enum tables.
``mgk extract FILE OUT.npz [--layout oihw|raw] [--table T.yaml]``: weights as int8 arrays (OIHW kernels,
named GRU gates) plus the scale records and a layer's weight scale where a table pairs them; OUT.npz is
written to a temporary file and renamed, so a failure never leaves a partial file nor replaces a good one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TABLE_HELP = "offset table YAML: layer offsets and shapes the file does not record (docs/ingenic.md)"
HELP = "inspect an Ingenic Magik .mgk model or extract its weights (OIHW / GRU gates) to .npz"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="mgk_command", metavar="ACTION", required=True)
    inspect = sub.add_parser("inspect", help="ELF identity, sections, weight region, layers, scale records")
    inspect.add_argument("file", type=Path, help="the .mgk file")
    inspect.add_argument("--table", type=Path, help=TABLE_HELP)
    inspect.add_argument("--json", action="store_true", help="print everything as JSON")
    extract = sub.add_parser("extract", help="write the weights to an .npz")
    extract.add_argument("file", type=Path, help="the .mgk file")
    extract.add_argument("out", type=Path, help="output .npz (written atomically)")
    extract.add_argument("--layout", choices=("oihw", "raw"), default="oihw",
                         help="oihw: NMHWSOIB2 to OIHW and GRUs to gates (default); raw: bytes as stored")
    extract.add_argument("--table", type=Path, help=TABLE_HELP)
    extract.add_argument("--json", action="store_true",
                         help="print the summary as JSON (out, arrays with their shapes, bytes, notes)")


def _load(args: argparse.Namespace):
    from libredgetpu_ros.ingenic import load_mgk, load_table

    return load_mgk(args.file, load_table(args.table) if args.table else None)


def _print_inspect(info: dict) -> None:
    elf = info["elf"]
    print(f"{info['source']}: {info['file_size']} bytes, {elf['class']} {elf['endianness']}-endian "
          f"{elf['machine']} {elf['type']} (e_flags {elf['flags']}: {elf['arch']}), "
          f"{len(elf['sections'])} sections, section table at {elf['section_table']['offset']} "
          f"({elf['section_table']['size']} bytes)")
    for s in elf["sections"]:
        print(f"  [{s['index']:2}] {s['name'] or '-':<18} {s['type']:<20} offset {s['offset']:>8} "
              f"size {s['size']:>8}")
    prefix = info["header_prefix"]
    if prefix["size"]:
        print(f"header prefix: offset {prefix['offset']} (0x{prefix['offset']:x}), {prefix['size']} bytes, "
              f"{len(prefix['blocks'])} sparse 256-byte blocks (meaning unknown; non-zero 8-byte words, hex)")
        for block in prefix["blocks"]:
            words = ", ".join(f"+{w['at']}: {w['hex']}" for w in block["words"]) or "all zero"
            print(f"  block at {block['offset']}: {words}")
    region = info["weight_region"]
    stats = region["stats"]
    print(f"weight region: offset {region['offset']} (0x{region['offset']:x}), {region['size']} bytes, "
          f"{region['gap_after_elf']} bytes after the end of the ELF data (start: {region['start_from']})")
    if stats["bytes"]:
        print(f"  bytes: {stats['zero_share']:.1%} zero; nibble TVD {stats['nibble_tvd']:.3f} "
              f"(~0.4-0.5 for int8 weights, ~0 for packed 4-bit); "
              f"|int8| >= 64: {stats['share_abs_ge_64']:.1%} "
              "(~5-11% for int8 weights, ~50% for random nibbles)")
    print(f"layers: {len(info['layers'])}")
    for layer in info["layers"]:
        where = (f"offset {layer['offset']} size {layer['size']}" if layer["offset"] is not None
                 else "offset unknown (give --table)")
        shape = layer["shape"] or layer["shape_guess"] or "-"
        index = layer["scale_record"]
        record = "-" if index is None else f"{index} ({layer['scale_source']})"
        print(f"  {layer['name']:<28} {layer['type'] or '?':<10} {where:<28} {layer['layout'] or '-':<19} "
              f"shape {shape}; scale record {record}")
    print(f"scale records: {len(info['scale_records'])} (64 bytes each; layer unknown unless a table "
          "pairs it)")
    for r in info["scale_records"]:
        print(f"  [{r['index']}] offset {r['offset']} (0x{r['offset']:x}): "
              f"input scale {r['input_scale']:.6g} zp {r['input_zero_point']}, "
              f"weight scale {r['weight_scale']:.6g} zp {r['weight_zero_point']}, ids {tuple(r['ids'])}")
    print(f"per-channel runs: {len(info['channel_runs'])} (one value repeated; arrays, not records)")
    for run in info["channel_runs"]:
        value = f"{run['value']:.6g}" if run["kind"] == "f32" else str(run["value"])
        print(f"  offset {run['offset']} (0x{run['offset']:x}): {run['count']} x {run['kind']} {value}")
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
    if args.json:
        print(json.dumps({"out": str(args.out), "layout": args.layout, "bytes": size, "notes": list(notes),
                          "arrays": {k: list(v.shape) for k, v in arrays.items()}}, indent=2))
        return 0
    for note in notes:
        print(f"note: {note}")
    print(f"{args.out}: {len(arrays)} arrays, {size} bytes ({args.layout})")
    return 0
