"""Output relayout (tiled device bytes -> dense y, x, z) on every fixture output layer: the current
``relayout_output`` against two baselines measured in the same run:

- *before*: ``formats/layout.py`` as of ``--before`` (default: the revision before the row-gather change),
  loaded from git, which builds a (y, x, z) byte index on every call;
- *per-cell loop*: LibrEdgeTPU's algorithm (a Python loop over (y, x) computing each run's start from the
  layout tables and copying its z bytes), written here from its description.

Thread CPU time (``time.thread_time_ns``) per call, median of ``--repeats`` batches. Every result is checked
bit-exact against *before*.

Run: .venv/bin/python bench/bench_relayout.py   (writes bench/results/relayout.md)
"""

from __future__ import annotations

import argparse
import subprocess
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _timing import median_ns, ratio, thread_times_ns, write_report  # beside this script (on sys.path)
from libredgetpu_ros.fixtures import fixtures_dir
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.formats.layout import relayout_output

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "relayout.md"
LAYOUT = "libredgetpu_ros/libredgetpu_ros/formats/layout.py"
BEFORE = "0ee4ccc"  # the last revision with the byte-index relayout


def _module_at(rev: str) -> types.ModuleType:
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{LAYOUT}"], check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType(f"layout_{rev}")
    exec(compile(source, f"{rev}:{LAYOUT}", "exec"), module.__dict__)  # our own file, from git
    return module


def per_cell_loop(raw: np.ndarray, layer) -> np.ndarray:
    """LibrEdgeTPU's relayout: for each (y, x), the run start from the six tables, then a z-byte copy."""
    lay = layer.output_layout
    y_dim, x_dim, z = layer.y_dim, layer.x_dim, layer.z_dim
    if lay is None:
        return raw[:y_dim * x_dim * z].reshape(y_dim, x_dim, z)
    dest = np.zeros((y_dim, x_dim, z), np.uint8)
    for y in range(y_dim):
        y_tile = lay.y_coordinate_to_linear_tile_id_map[y]
        y_local = lay.y_coordinate_to_local_y_offset[y]
        for x in range(x_dim):
            tile = y_tile + lay.x_coordinate_to_linear_tile_id_map[x]
            base = (lay.linearized_tile_byte_offset[tile] + y_local * lay.x_coordinate_to_local_y_row_size[x]
                    + lay.x_coordinate_to_local_byte_offset[x])
            dest[y, x, :] = raw[base:base + z]
    return dest


def _per_call_us(fn: Callable[[], object], repeats: int) -> float:
    fn()
    calls = 1

    def batch() -> None:
        for _ in range(calls):
            fn()

    # batch size: about 2 ms of CPU per batch
    while thread_times_ns(batch, 1, warm_up=False)[0] <= 2_000_000 and calls <= 10_000:
        calls *= 2
    return median_ns(batch, repeats, warm_up=False) / calls / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=BEFORE, help="git revision of the baseline layout.py")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    before = _module_at(args.before)
    base = fixtures_dir()
    seen: set[tuple] = set()
    rows = []
    for path in sorted(base.glob("*/*_edgetpu.tflite")):
        model = load_model(path)
        for op in model.edgetpu_ops():
            for layer in model.darwinn(op).runnable.output_layers:
                key = (layer.y_dim, layer.x_dim, layer.z_dim, before.is_dense(layer))
                if key in seen:
                    continue
                seen.add(key)
                raw = np.random.default_rng(0).integers(0, 256, layer.size_bytes, dtype=np.uint8)
                ref = before.relayout_output(raw, layer)
                assert np.array_equal(relayout_output(raw, layer), ref), layer.name
                assert np.array_equal(per_cell_loop(raw, layer), ref), layer.name
                t_before = _per_call_us(lambda r=raw, la=layer: before.relayout_output(r, la), args.repeats)
                t_loop = _per_call_us(lambda r=raw, la=layer: per_cell_loop(r, la), args.repeats)
                t_now = _per_call_us(lambda r=raw, la=layer: relayout_output(r, la), args.repeats)
                shape = f"{layer.y_dim}x{layer.x_dim}x{layer.z_dim}"
                name = f"{path.parent.name}: {layer.name[:40]}"
                rows.append((name, shape, key[3], t_before, t_loop, t_now))
    lines = [
        "# Output relayout (formats/layout.py)",
        "",
        f"`relayout_output` per call on each distinct fixture output layer, thread CPU time, median of "
        f"{args.repeats} batches; baselines measured in the same run: *before* = `layout.py` at "
        f"`{args.before}` (one (y, x, z) byte index per call), *per-cell loop* = LibrEdgeTPU's algorithm "
        "(Python loop over (y, x), one z-byte copy each). All three give identical bytes (checked).",
        "",
        "| layer | y x x x z | dense | before us | per-cell loop us | now us | before / now | loop / now |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, shape, dense, tb, tl, tn in rows:
        lines.append(f"| {name} | {shape} | {'yes' if dense else 'no'} | {tb:.1f} | {tl:.1f} | {tn:.1f} "
                     f"| {ratio(tb, tn)} | {ratio(tl, tn)} |")
    tiled = [r for r in rows if not r[2]]
    worst = min(r[4] / r[5] for r in tiled)
    ssd = next((r for r in rows if r[1] == "10x10x1280"), None)
    lines += ["", f"Tiled layers: now faster than the per-cell loop by {worst:.1f}x at worst "
              f"(target: >= 1x on every layer: {'met' if worst >= 1 else 'NOT met'})."]
    if ssd is not None:
        lines.append(f"SSD 10x10x1280: before {ssd[3]:.1f} us = {ssd[3] / ssd[4]:.1f}x the per-cell loop; "
                     f"now {ssd[5]:.1f} us = {ssd[5] / ssd[4]:.2f}x the per-cell loop.")
    lines.append("")
    write_report(OUT, lines)


if __name__ == "__main__":
    main()
