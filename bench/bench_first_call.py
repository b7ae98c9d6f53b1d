"""First-call cost of the compiled kernels (numba); report: bench/results/first_call.md.

1. Import: ``import libredgetpu_ros.matmul`` and the CLI's entry module in a fresh interpreter (wall time,
   whether numba got imported).
2. API: a fresh process opens ``MatMulEngine`` (dense_1024, CPU twin) and calls ``set_weights`` 21 times
   (float32 -> int8 + blob, each a new matrix made outside the timed region): the first call's thread CPU
   time against the median of the next 20. Runs with an empty cache folder (``XDG_CACHE_HOME`` a new
   folder) and the package copied into a folder bind-mounted read-only (``unshare -m``; if the kernel
   refuses, the copy is only chmod'ed and the report says so), interleaved with runs on the cache the
   previous run filled.
3. Control node: the first ``~/set_weights`` after ``active`` (round trip, and the node's own ``total_ms``)
   against the median of the next 20, node started on an empty cache folder from the read-only copy.
4. Modules (``_first_call_modules.py``): the DeepLab pipeline, SpotTracker, LoomingDetector, OpticalFlow,
   VisualCompass and PatternTracker, each opened in a fresh process from the read-only copy (empty and warm
   cache folder), then the first data-path call against the median of the next 20 (thread CPU and wall).

Run inside the localhost-only sandbox: ``tools/ros_sandbox.sh .venv/bin/python bench/bench_first_call.py``.
Target (issue 36): first call <= 2x the median of the next 20.
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
import numpy as np
from _timing import write_report

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "libredgetpu_ros" / "libredgetpu_ros"
RESULTS = REPO / "bench" / "results" / "first_call.md"
T_CONFIGURE, T_ACTIVATE = 1, 3

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


def bench_node(prefix: list[str], env: dict[str, str], work: Path, calls: int) -> dict[str, float]:
    import rclpy
    import rclpy.context
    sys.path.insert(0, str(REPO / "libredgetpu_ros" / "test" / "ros"))
    import _control_harness as harness

    context = rclpy.context.Context()
    rclpy.init(context=context, domain_id=int(env["ROS_DOMAIN_ID"]))
    ns = "/bench_first_call"
    log = work / "node.log"
    node_env = {**env, "XDG_CACHE_HOME": str(work / "node_cache")}
    proc = subprocess.Popen([*prefix, *harness.node_args(ns, "template:=1024", "clip_policy:=clip")],
                            env=node_env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    ctl = harness.ControlHarness(context, f"{ns}/control_node")
    try:
        t0 = time.perf_counter()
        assert ctl.transition(T_CONFIGURE), f"configure failed, see {log}"
        configure_s = time.perf_counter() - t0
        assert ctl.transition(T_ACTIVATE), f"activate failed, see {log}"
        scale = np.frombuffer(ctl.get_weights().weight_max, np.float32)[:, None]
        rng = np.random.default_rng(1)
        requests = [ctl.set_weights_request((rng.uniform(-0.9, 0.9, (1024, 1024)) * scale).astype(np.float32))
                    for _ in range(calls + 1)]
        rtt, total, split = [], [], []
        for req in requests:
            t = time.perf_counter()
            resp = ctl.call(ctl.set_weights_client, req)
            rtt.append((time.perf_counter() - t) * 1e3)
            assert resp.accepted, resp.message
            total.append(resp.total_ms)
            split.append((resp.validate_ms, resp.quantize_ms, resp.blob_ms, resp.swap_ms))
    finally:
        ctl.close()
        proc.terminate()
        proc.wait(timeout=10)
        context.try_shutdown()
    return {"configure_s": configure_s, "rtt": rtt, "total": total, "split": split}


def _spread(values: list[float], digits: int = 2) -> str:
    return f"{min(values):.{digits}f}–{max(values):.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--no-node", action="store_true", help="skip the control node part (no ROS)")
    parser.add_argument("--modules", nargs="*", default=list(modules.CASES), choices=list(modules.CASES),
                        help="module cases to run (none: skip the part)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_first_call_"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", "LIBREDGETPU_ROS_NUMBA_CACHE", "XDG_CACHE_HOME")}
    root, prefix, how = _read_only_copy(work)
    from libredgetpu_ros.fixtures import ENV_VAR, fixtures_dir

    # the copy's folder is not beside the checkout: the fixtures are named explicitly
    ro_env = {**env, "PYTHONPATH": str(root), "PYTHONSAFEPATH": "1", ENV_VAR: str(fixtures_dir())}
    imports = bench_imports({**env, "PYTHONSAFEPATH": "1"}, args.repeats)
    api = bench_api(prefix, ro_env, work, args.repeats)
    module_runs = modules.run(prefix, ro_env, work, args.repeats, args.calls, args.modules)
    node = None
    if not args.no_node:
        from libredgetpu_ros.ros.environment import localhost_only_environ

        ros_env = localhost_only_environ(domain_id=200 + os.getpid() % 30, log_dir=str(work / "ros_log"))
        os.environ.update(ros_env)
        node = bench_node(prefix, {**ro_env, **ros_env}, work, args.calls)
    leaked = sorted(str(p.relative_to(root)) for p in root.rglob("*.nb[ic]"))

    lines = [
        "# First-call cost of the compiled kernels (matmul fast path, perception and robotics modules)",
        "",
        f"`.venv/bin/python bench/bench_first_call.py` on {platform.machine()} ({os.cpu_count()} cores, "
        f"shared with ~8 other engineers' jobs: load average {os.getloadavg()[0]:.1f} at the end). "
        f"{args.repeats} interleaved repeats, each in a fresh process; spreads are min–max over the repeats. "
        "Call times are thread CPU time (the load does not inflate them), open and import times wall time.",
        "",
        f"Package folder: a copy made read-only by {how}; numba cache files written inside it: "
        f"{len(leaked)}{' (' + ', '.join(leaked[:4]) + ')' if leaked else ''}.",
        "",
        "## Import (fresh interpreter; `numba` alone: what an importer no longer pays)",
        "",
        "| module | process CPU | wall | numba imported |",
        "|---|---|---|---|",
    ]
    for module, runs in imports.items():
        lines.append(f"| `import {module}` | {_spread([r['cpu'] * 1e3 for r in runs], 0)} ms | "
                     f"{_spread([r['s'] * 1e3 for r in runs], 0)} ms | "
                     f"{'yes' if any(r['numba'] for r in runs) else 'no'} |")
    lines += [
        "",
        "## API: fresh process, `MatMulEngine.from_template(1024)` then 21 `set_weights` (float32 -> blob)",
        "",
        "| cache folder | open (wall) | open (process CPU) | first call | median of next 20 | first / median "
        "| target ≤ 2× |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, runs in api.items():
        ratios = [r["times"][0] / statistics.median(r["times"][1:]) for r in runs]
        lines.append(
            f"| {kind} | {_spread([r['open_s'] for r in runs])} s | "
            f"{_spread([r['open_cpu_s'] for r in runs])} s | "
            f"{_spread([r['times'][0] for r in runs], 3)} ms | "
            f"{_spread([statistics.median(r['times'][1:]) for r in runs], 3)} ms | "
            f"{_spread(ratios)}× | {'met' if max(ratios) <= 2.0 else 'missed'} |")
    if node is not None:
        rtt_med, tot_med = statistics.median(node["rtt"][1:]), statistics.median(node["total"][1:])
        lines += [
            "",
            f"## Control node: first `~/set_weights` after `active` (N = 1024, empty cache folder, read-only "
            f"package copy; configure took {node['configure_s']:.2f} s)",
            "",
            "| figure | first call | median of next " f"{args.calls} | first / median | target ≤ 2× |",
            "|---|---|---|---|---|",
            f"| round trip (client wall) | {node['rtt'][0]:.2f} ms | {rtt_med:.2f} ms | "
            f"{node['rtt'][0] / rtt_med:.2f}× | {'met' if node['rtt'][0] <= 2 * rtt_med else 'missed'} |",
            f"| node `total_ms` | {node['total'][0]:.2f} ms | {tot_med:.2f} ms | "
            f"{node['total'][0] / tot_med:.2f}× | {'met' if node['total'][0] <= 2 * tot_med else 'missed'} |",
        ]
        for i, name in enumerate(("validate_ms", "quantize_ms", "blob_ms", "swap_ms")):
            med = statistics.median(s[i] for s in node["split"][1:])
            lines.append(f"| node `{name}` | {node['split'][0][i]:.3f} ms | {med:.3f} ms | "
                         f"{node['split'][0][i] / med if med else float('nan'):.2f}× | |")
    if module_runs:
        lines += ["", *modules.report(module_runs, args.calls)]
    lines += [
        "",
        "numba is imported and the kernels compiled (empty folder) or loaded (warm folder) when the engine "
        "or module opens (`fastpath.warm_up` in `MatMulEngine.__init__`, with one full-size dry-run "
        "`set_weights` so the allocator's first large allocations happen there too; `warm_up` of "
        "`postprocess/kernels.py`, `robotics/{flow,spot,looming}_kernels.py` when the DeepLab tail, the "
        "flow, the spot check and the looming border/TTC are built), for every argument type the data path "
        "passes, read-only arrays included (`test/test_jit_warm_up.py`); the cache folder is "
        "`jit.cache_dir()` (docs/matmul.md).",
        "",
    ]
    write_report(RESULTS, lines)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
