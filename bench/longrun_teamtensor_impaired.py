"""Team Tensor over issue 27's harsh network: 20 seeds of each workload, with time and retransmissions.

    tools/ros_sandbox.sh .venv/bin/python bench/longrun_teamtensor_impaired.py [--seeds 20] [--parallel 15]
      ->  bench/results/teamtensor_impaired.md, and the table in docs/teamtensor.md (between its markers)

40 % loss, 20 % duplication, 0-200 ms jitter (reordering), 1 % single-byte corruption, both directions,
through the test suite's impairment proxy (test/teamtensor/_proxy.py) against in-process workers; regression
(Linear 4->2, 20 batches of 64: 2 fragments each), small batches (the same, batches of 4: one datagram) and
classification (Conv2D ... Softmax, 20 batches of 32: 4 fragments). A run passes when its losses,
evaluation metrics and weights are bit-identical to the same training without a network (and the worker
executed each batch once). Each run is bounded (_impaired.RUN_DEADLINE_S); ``--parallel`` runs share one
event loop. Not part of the suite (test_impaired.py runs 2 seeds of each).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELPERS = ROOT / "libredgetpu_ros" / "test" / "teamtensor"
OUT = Path(__file__).resolve().parent / "results" / "teamtensor_impaired.md"
DOCS = ROOT / "docs" / "teamtensor.md"
BEGIN, END = "<!-- longrun_teamtensor_impaired: begin -->", "<!-- longrun_teamtensor_impaired: end -->"


def _impaired():
    spec = importlib.util.spec_from_file_location("_impaired", HELPERS / "_impaired.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["_impaired"] = module
    spec.loader.exec_module(module)
    return module


def _table(runs, seeds: int, wall: float) -> str:
    rows = ["| workload | runs | bit-identical | failed | time per run, s (median / max) | "
            "retransmissions (median / max) | datagrams dropped / duplicated / corrupted by the proxy | "
            "rejected by the worker's integrity check |",
            "|---|---|---|---|---|---|---|---|"]
    for name in ("regression", "small batches", "classification"):
        mine = [r for r in runs if r.workload == name]
        ok = [r for r in mine if r.identical]
        times = [r.seconds for r in mine]
        rtx = [r.retransmissions for r in ok] or [0]

        def total(key: str, rs=mine) -> int:
            return sum(r.proxy.get(f"up {key}", 0) + r.proxy.get(f"down {key}", 0) for r in rs)

        integrity = sum(r.worker["rejected"].get("integrity", 0) for r in mine)
        rows.append(f"| {name} | {len(mine)} | {len(ok)} | {len(mine) - len(ok)} | "
                    f"{statistics.median(times):.1f} / {max(times):.1f} | {statistics.median(rtx):.0f} / "
                    f"{max(rtx)} | {total('dropped')} / {total('duplicated')} / {total('corrupted')} | "
                    f"{integrity} |")
    failures = [f"- {r.workload} seed {r.seed}: {r.error or 'not bit-identical'}" for r in runs
                if not r.identical] or ["Every run ended bit-identical to the run without a network."]
    return "\n".join([f"{seeds} seeds per workload, {len(runs)} runs in {wall:.0f} s wall "
                      f"({time.strftime('%Y-%m-%d')}, shared 2-core machine, runs interleaved on one loop):",
                      "", *rows, "", *failures])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--parallel", type=int, default=15, help="runs at once")
    parser.add_argument("--no-docs", action="store_true", help="do not update docs/teamtensor.md")
    args = parser.parse_args()
    impaired = _impaired()
    jobs = [(name, seed) for seed in range(100, 100 + args.seeds)
            for name in ("regression", "small batches", "classification")]

    async def run_all():
        out = []
        for i in range(0, len(jobs), args.parallel):
            chunk = jobs[i:i + args.parallel]
            out += await asyncio.gather(*(impaired.run_one(name, impaired.workloads(seed)[name], seed)
                                          for name, seed in chunk))
            print(f"{len(out)}/{len(jobs)} runs done", flush=True)
        return out

    t0 = time.monotonic()
    runs = asyncio.run(run_all())
    table = _table(runs, args.seeds, time.monotonic() - t0)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text("# Team Tensor under issue 27's harsh network (bench/longrun_teamtensor_impaired.py)\n\n"
                   + table + "\n")
    if not args.no_docs:
        text = DOCS.read_text()
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            DOCS.write_text(head + BEGIN + "\n" + table + "\n" + END + rest.split(END, 1)[1])
    print(table)
    return 0 if all(r.identical for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
