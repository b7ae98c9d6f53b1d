"""First-call cost of the compiled kernels (numba); report: bench/results/first_call.md.

1. Import: ``import libredgetpu_ros.matmul`` and the CLI's entry module in a fresh interpreter (wall time,
   whether numba got imported).
2. API: a fresh process opens ``MatMulEngine`` (dense_1024, CPU twin) and calls ``set_weights`` 21 times
   (float32 -> int8 + blob, each a new matrix made outside the timed region): the first call's thread CPU
   time against the median of the next 20. Runs with an empty cache folder (``XDG_CACHE_HOME`` a new
   folder) and the package copied into a folder bind-mounted read-only (``unshare -m``; if the kernel
   refuses, the copy is only chmod'ed and the report says so), interleaved with runs on the cache the
   previous run filled.
3. Control node (``_first_call_node.py``): the first ``~/set_weights`` round trip after ``active`` against the
   median of the next 20, over ``--launches`` fresh node and client processes (node on an empty cache folder
   from the read-only copy), beside a bare rclpy service of the same type and payload launched the same way,
   and the split of each round trip (client send, delivery, server take, handler, response, way back).
4. Modules (``_first_call_modules.py``): the DeepLab pipeline, SpotTracker, LoomingDetector, OpticalFlow,
   VisualCompass and PatternTracker, each opened in a fresh process from the read-only copy (empty and warm
   cache folder), then the first data-path call against the median of the next 20 (thread CPU and wall).

Run inside the localhost-only sandbox: ``tools/ros_sandbox.sh .venv/bin/python bench/bench_first_call.py``.
Target (issue 36): first call <= 2x the median of the next 20.

Each part's section of the report opens with its own run line (command, date, load average at its start and
end, how the package copy was made read-only). A run of some parts only (``--no-api``, ``--no-node``,
``--modules`` with fewer or no cases) replaces those parts' sections and keeps the others, with their own
run lines, from the report file: every section says which run it came from.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _first_call_modules as modules
import _first_call_node as node_part
from _timing import write_report

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "libredgetpu_ros" / "libredgetpu_ros"
RESULTS = REPO / "bench" / "results" / "first_call.md"

_IMPORT_CHILD = """
import sys, time, json
t, c = time.perf_counter(), time.process_time()
import {module}
s, c = time.perf_counter() - t, time.process_time() - c
print(json.dumps({{"s": s, "cpu": c, "numba": "numba" in sys.modules}}))
"""
_API_CHILD = """
import json, time
import numpy as np
t = time.perf_counter(); c = time.process_time()
from libredgetpu_ros.matmul import MatMulEngine
engine = MatMulEngine.from_template(1024, backend="cpu")
open_s, open_cpu = time.perf_counter() - t, time.process_time() - c
scale = engine.weight_range()[1][:, None]
rng = np.random.default_rng(0)
mats = [(rng.uniform(-0.9, 0.9, (1024, 1024)) * scale).astype(np.float32) for _ in range(21)]
times = []
for m in mats:
    s = time.thread_time_ns(); engine.set_weights(m); times.append((time.thread_time_ns() - s) / 1e6)
print(json.dumps({"open_s": open_s, "open_cpu_s": open_cpu, "times": times}))
"""


def _read_only_copy(work: Path) -> tuple[Path, list[str], str]:
    """(PYTHONPATH root holding a copy of the package, command prefix running a child with that root
    read-only, how it is made read-only)."""
    root = work / "site"
    shutil.copytree(PACKAGE, root / "libredgetpu_ros", ignore=shutil.ignore_patterns("__pycache__"))
    prefix = ["unshare", "-m", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', str(root)]
    probe = subprocess.run([*prefix, "sh", "-c", f'! touch "{root}/probe" 2>/dev/null'], capture_output=True)
    if probe.returncode == 0:
        return root, prefix, "read-only bind mount (unshare -m)"
    subprocess.run(["chmod", "-R", "a-w", str(root)], check=True)
    return root, [], "chmod a-w only (no mount namespace here; root can still write)"


def _child(prefix: list[str], code: str, env: dict[str, str]) -> dict:
    done = subprocess.run([*prefix, sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_imports(env: dict[str, str], repeats: int) -> dict[str, list[dict]]:
    modules = ("libredgetpu_ros.matmul", "libredgetpu_ros.cli.main", "numba")
    out: dict[str, list[dict]] = {m: [] for m in modules}
    for _ in range(repeats):  # interleaved
        for module in modules:
            out[module].append(_child([], _IMPORT_CHILD.format(module=module), env))
    return out


def bench_api(prefix: list[str], env: dict[str, str], work: Path, repeats: int) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {"empty cache": [], "warm cache": []}
    for k in range(repeats):  # interleaved: an empty folder, then the one it filled
        cache = work / f"cache_{k}"
        for kind in runs:
            r = _child(prefix, _API_CHILD, {**env, "XDG_CACHE_HOME": str(cache)})
            runs[kind].append(r)
    return runs


def _spread(values: list[float], digits: int = 2) -> str:
    return f"{min(values):.{digits}f}–{max(values):.{digits}f}"


HEADER = [  # the report's opening; each section then names its own run
    "# First-call cost of the compiled kernels (matmul fast path, perception and robotics modules)",
    "",
    "Repeats and launches are interleaved, each in a fresh process; spreads are min–max over them. Call "
    "times are thread CPU time (the load does not inflate them), open and import times wall time. Each "
    "section names the run it comes from (`bench/bench_first_call.py` can run some parts only).",
    "",
    "numba is imported and the kernels compiled (empty folder) or loaded (warm folder) when the engine "
    "or module opens (`fastpath.warm_up` in `MatMulEngine.__init__`, with one full-size dry-run "
    "`set_weights` so the allocator's first large allocations happen there too; `warm_up` of "
    "`postprocess/kernels.py`, `robotics/{flow,spot,looming}_kernels.py` when the DeepLab tail, the "
    "flow, the spot check and the looming border/TTC are built), for every argument type the data path "
    "passes, read-only arrays included (`test/test_jit_warm_up.py`); the cache folder is "
    "`jit.cache_dir()` (docs/matmul.md).",
]
SECTIONS = ("## Import", "## API", "## Control node", "## Modules")  # report order


def _shown_arguments(argv: list[str]) -> str:
    """The command line's arguments as the report's run lines show them: without ``--out FILE`` and
    ``--keep`` (where a trial run wrote, not what it measured)."""
    shown, skip = [], False
    for arg in argv:
        if skip or arg == "--keep" or arg.startswith("--out="):
            skip = False
            continue
        if arg == "--out":
            skip = True
            continue
        shown.append(arg)
    return "".join(" " + a for a in shown)


def merged_sections(report: Path, fresh: dict[str, list[str]]) -> list[str]:
    """The report's sections in ``SECTIONS`` order (each preceded by a blank line): the ``fresh`` ones of this
    run, the others as the existing ``report`` file has them (a part not run keeps its earlier run)."""
    kept: dict[str, list[str]] = {}
    if report.exists():
        current: list[str] | None = None
        for line in report.read_text(encoding="utf-8").splitlines():
            if line.startswith("## "):
                key = next((k for k in SECTIONS if line.startswith(k)), None)
                current = kept.setdefault(key, []) if key else None
            if current is not None:
                current.append(line)
    out: list[str] = []
    for key in SECTIONS:
        block = fresh.get(key) or kept.get(key)
        if block:
            while block and not block[-1].strip():
                block = block[:-1]
            out += ["", *block]
    return [*out, ""]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--no-node", action="store_true", help="skip the control node part (no ROS)")
    parser.add_argument("--launches", type=int, default=10, help="fresh server + client processes per kind")
    parser.add_argument("--no-api", action="store_true", help="skip the import and API parts")
    parser.add_argument("--out", type=Path, default=RESULTS, help="report file (trial runs: elsewhere)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, every call's times)")
    parser.add_argument("--modules", nargs="*", default=list(modules.CASES), choices=list(modules.CASES),
                        help="module cases to run (none: skip the part)")
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="bench_first_call_"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", "LIBREDGETPU_ROS_NUMBA_CACHE", "XDG_CACHE_HOME")}
    root, prefix, how = _read_only_copy(work)
    from libredgetpu_ros.fixtures import ENV_VAR, fixtures_dir

    # the copy's folder is not beside the checkout: the fixtures are named explicitly
    ro_env = {**env, "PYTHONPATH": str(root), "PYTHONSAFEPATH": "1", ENV_VAR: str(fixtures_dir())}
    imports = {} if args.no_api else bench_imports({**env, "PYTHONSAFEPATH": "1"}, args.repeats)
    api = {} if args.no_api else bench_api(prefix, ro_env, work, args.repeats)
    module_runs = modules.run(prefix, ro_env, work, args.repeats, args.calls, args.modules)
    node = None
    if not args.no_node:
        from libredgetpu_ros.ros.environment import localhost_only_environ

        ros_env = localhost_only_environ(domain_id=200 + os.getpid() % 30, log_dir=str(work / "ros_log"))
        os.environ.update(ros_env)
        node = node_part.run(prefix, {**ro_env, **ros_env}, work, args.launches, args.calls)
    leaked = sorted(str(p.relative_to(root)) for p in root.rglob("*.nb[ic]"))
    run_line = (
        f"Run: `.venv/bin/python bench/bench_first_call.py{_shown_arguments(sys.argv[1:])}` "
        f"(repeats {args.repeats}{f', {args.launches} launches per kind' if node is not None else ''}) on "
        f"{platform.machine()} ({os.cpu_count()} cores, shared with other engineers' jobs), "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}: load average {load_start:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end; package copy made read-only by {how}, numba cache files "
        f"written inside it: {len(leaked)}{' (' + ', '.join(leaked[:4]) + ')' if leaked else ''}.")
    sections: dict[str, list[str]] = {}
    if imports:
        sections["## Import"] = [
            "## Import (fresh interpreter; `numba` alone: what an importer no longer pays)",
            "",
            run_line,
            "",
            "| module | process CPU | wall | numba imported |",
            "|---|---|---|---|",
        ]
        for module, runs in imports.items():
            sections["## Import"].append(
                f"| `import {module}` | {_spread([r['cpu'] * 1e3 for r in runs], 0)} ms | "
                f"{_spread([r['s'] * 1e3 for r in runs], 0)} ms | "
                f"{'yes' if any(r['numba'] for r in runs) else 'no'} |")
    if api:
        sections["## API"] = [
            "## API: fresh process, `MatMulEngine.from_template(1024)` then 21 `set_weights` "
            "(float32 -> blob)",
            "",
            run_line,
            "",
            "| cache folder | open (wall) | open (process CPU) | first call | median of next 20 | "
            "first / median | target ≤ 2× |",
            "|---|---|---|---|---|---|---|",
        ]
        for kind, runs in api.items():
            ratios = [r["times"][0] / statistics.median(r["times"][1:]) for r in runs]
            sections["## API"].append(
                f"| {kind} | {_spread([r['open_s'] for r in runs])} s | "
                f"{_spread([r['open_cpu_s'] for r in runs])} s | "
                f"{_spread([r['times'][0] for r in runs], 3)} ms | "
                f"{_spread([statistics.median(r['times'][1:]) for r in runs], 3)} ms | "
                f"{_spread(ratios)}× | {'met' if max(ratios) <= 2.0 else 'missed'} |")
    if node is not None:
        heading, *rest = node_part.report(node, args.calls)
        sections["## Control node"] = [heading, "", run_line, *rest]
    if module_runs:
        heading, *rest = modules.report(module_runs, args.calls)
        sections["## Modules"] = [heading, "", run_line, *rest]
    lines = [*HEADER, *merged_sections(args.out, sections)]
    write_report(args.out, lines)
    if args.keep:
        print(f"work folder kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
