"""Motion and learning against their baselines, one run (issue 32): the flow's CPU work per 320×240 frame
beside a bare LiteRT invoke of the twin, and the reservoir step and the embedding query beside LibrEdgeTPU's
code and a NumPy float baseline.

All thread CPU time, BLAS and LiteRT single-threaded, candidates timed in interleaved rounds (other jobs share
this machine's cores: each figure is the median over rounds, with the spread of the round medians):

- flow: ``OpticalFlow.step(frame)`` on 320×240 grey frames of a photo moving 4 px/frame, with the refinement
  at the frame's resolution (default) and without it; the backend call inside it; and a bare
  ``ai_edge_litert`` interpreter on the twin (set_tensor, invoke, get_tensor), the floor any CPU flow pays;
- reservoir step: ours with one pass and with the passes that put it within 2x the float64 network (17 at
  N=256, 33 at N=1024); LibrEdgeTPU's ``ReservoirComputer.step`` around a float32 BLAS stand-in for its
  device (it has no CPU twin); NumPy float64 ``tanh(W x + W_in u + b)``;
- query: 1,024 entries of 1024-d, top-1, ours (dense_1024 twin, open set) vs LibrEdgeTPU's query on the
  stand-in vs NumPy float32 ``argmax(E q)``.

LibrEdgeTPU is imported from a checkout (``$LIBREDGETPU_SRC``); its columns say "absent" without one.

    LIBREDGETPU_SRC=... .venv/bin/python bench/bench_motion.py     # writes bench/results/motion.md
"""

from __future__ import annotations

import _common

_common.single_threaded_blas()  # before NumPy loads BLAS: thread CPU time must see all the work

import platform  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _timing import interleaved_rounds_ns, write_report  # noqa: E402
from bench_reservoir_embedding import CpuStandIn, libredgetpu, query_case  # noqa: E402
from libredgetpu_ros.fixtures import fixture  # noqa: E402
from libredgetpu_ros.matmul import MatMulEngine  # noqa: E402
from libredgetpu_ros.robotics.flow import OpticalFlow  # noqa: E402
from libredgetpu_ros.robotics.reservoir import ReservoirComputer, ReservoirConfig  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "motion.md"
ROUNDS = 7


def interleaved_us(candidates: dict[str, Callable[[], object]], calls: int) -> dict[str, tuple[float, ...]]:
    """(median, lowest round median, highest round median) in µs per candidate over ROUNDS rounds."""
    runs = interleaved_rounds_ns(candidates, ROUNDS, calls)
    medians = {name: [float(np.median(r)) / 1e3 for r in rounds_ns] for name, rounds_ns in runs.items()}
    return {name: (float(np.median(v)), min(v), max(v)) for name, v in medians.items()}


def bench_flow(scenes) -> list[dict[str, object]]:
    from ai_edge_litert.interpreter import Interpreter

    frames = scenes.camera_sequence("coffee", 4.0, 0.0, frames=24)
    rows = []
    for name in ("gabor_64x64_p4", "gabor_128x128_p4"):
        model = fixture(f"robotics/optical_flow/{name}_edgetpu.tflite")
        refined = OpticalFlow.from_template(model, backend="cpu")
        plain = OpticalFlow.from_template(model, backend="cpu", refine=False)
        bare = Interpreter(model_path=str(refined.template.twin_path), num_threads=1)
        bare.allocate_tensors()
        detail_in, detail_out = bare.get_input_details()[0], bare.get_output_details()[0]
        model_input = refined.model_frame(frames[0]).reshape(detail_in["shape"])

        def invoke(bare=bare, x=model_input, i=detail_in["index"], o=detail_out["index"]):
            bare.set_tensor(i, x)
            bare.invoke()
            return bare.get_tensor(o)

        backend_input = [model_input]
        cursor = iter(range(10**9))

        def stepper(flow, cursor=cursor):
            return lambda: flow.step(frames[next(cursor) % len(frames)])

        for flow in (refined, plain):
            for frame in frames[:3]:
                flow.step(frame)
        times = interleaved_us({"refined": stepper(refined), "plain": stepper(plain),
                                "backend": lambda flow=refined, x=backend_input: flow.runner.run(x),
                                "invoke": invoke}, 40)
        checks = [refined.step(frame) for frame in frames[:6]]
        rows.append({"template": name, **times,
                     "read": float(np.median([r.vx for r in checks[1:] if r.valid]))})
        refined.close()
        plain.close()
    return rows


def _stand_in_reservoir(lib, engine: MatMulEngine, n: int):
    lo, hi = engine.weight_range()
    stand_in = CpuStandIn(n, (float(lo.max()), float(hi.min())))
    theirs = lib["reservoir"].ReservoirComputer(stand_in, 1, seed=1)
    stand_in.set_weights(theirs._W_res)
    return theirs


def bench_reservoir(lib) -> list[dict[str, object]]:
    rows = []
    u = np.array([0.3])
    for n, passes in ((256, 17), (1024, 33)):
        engine = MatMulEngine.from_template(n, backend="cpu")
        one = ReservoirComputer(engine, ReservoirConfig(input_dim=1, seed=1))
        precise = ReservoirComputer(engine, ReservoirConfig(input_dim=1, seed=1, passes=passes))
        w, w_in, b = one.reservoir_weights, one.input_weights, one.input_bias
        state = {"x": np.zeros(n)}

        def numpy_step(w=w, w_in=w_in, b=b, state=state):
            state["x"] = np.tanh(w @ state["x"] + w_in @ u + b)

        candidates = {"one pass": lambda rc=one: rc.step(u),
                      f"{passes} passes": lambda rc=precise: rc.step(u), "numpy float64": numpy_step}
        if lib is not None:
            theirs = _stand_in_reservoir(lib, engine, n)
            candidates["LibrEdgeTPU"] = lambda theirs=theirs: theirs.step(u.astype(np.float32))
        rows.append({"n": n, "passes": passes, **interleaved_us(candidates, 60 if n == 256 else 20)})
        engine.close()
    return rows


def bench_query(lib) -> dict[str, object]:
    entries, query, db, theirs = query_case(lib)
    assert db.classify(query).label == "place17"
    unit = (entries / np.linalg.norm(entries, axis=1, keepdims=True)).astype(np.float32)
    q32 = query.astype(np.float32)
    candidates = {"ours (open set)": lambda: db.classify(query),
                  "numpy float32": lambda: int(np.argmax(unit @ (q32 / np.linalg.norm(q32))))}
    if theirs is not None:
        candidates["LibrEdgeTPU"] = lambda: theirs.query(q32)
    return interleaved_us(candidates, 60)


def _cell(value: tuple[float, ...] | None) -> str:
    if value is None:
        return "absent"
    median, low, high = value
    return f"{median:.1f} ({low:.1f}–{high:.1f})"


def render(flow_rows, reservoir_rows, query, where: str) -> list[str]:
    lines = ["# Motion and learning against their baselines (issue 32)", "",
             f"`bench/bench_motion.py` on {platform.machine()}, Python {platform.python_version()}, NumPy "
             f"{np.__version__}; thread CPU time in µs, median over {ROUNDS} interleaved rounds (the spread "
             f"of the round medians in brackets); BLAS and LiteRT single-threaded; other jobs shared the 2 "
             f"cores during the run. LibrEdgeTPU: {where}.", "",
             "## Flow per 320×240 frame (a photo moving 4 px/frame, CPU twin)", "",
             "| template | step, refined (default) | step, no refinement | our backend call in it | bare "
             "LiteRT invoke of the twin | CPU work beside the call: refined / not | read (4 px true) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for row in flow_rows:
        backend = row["backend"][0]
        lines.append(f"| {row['template']} | {_cell(row['refined'])} | {_cell(row['plain'])} | "
                     f"{_cell(row['backend'])} | {_cell(row['invoke'])} | "
                     f"{row['refined'][0] - backend:.0f} / {row['plain'][0] - backend:.0f} | "
                     f"{row['read']:.3f} px |")
    lines += ["", "CPU work = the step less the backend call: grey conversion and area resize, contrast "
              "normalisation, pooling, correlation and peak, and with the refinement the frame's two "
              "levels (blur, gradients, summed-area tables) and the Lucas-Kanade iterations from up to three "
              "peaks. On an Edge TPU the backend call leaves the CPU; the rest stays.", "",
              "## Reservoir step", "",
              "| N | ours, one pass | ours, passes within 2× float64 | LibrEdgeTPU (float32 stand-in) | "
              "NumPy float64 |", "|---|---:|---:|---:|---:|"]
    for row in reservoir_rows:
        lines.append(f"| {row['n']} | {_cell(row['one pass'])} | {row['passes']}: "
                     f"{_cell(row[str(row['passes']) + ' passes'])} | {_cell(row.get('LibrEdgeTPU'))} | "
                     f"{_cell(row['numpy float64'])} |")
    lines += ["", "Ours runs the template's exact int8 arithmetic on the CPU twin (the Edge TPU's work done "
              "by the CPU); the float baselines multiply in BLAS. On a device the passes are one invoke of a "
              "batch of that many rows.", "",
              "## Query, 1,024 entries of 1024-d, top-1", "",
              "| ours (open set, dense_1024 twin) | LibrEdgeTPU (float32 stand-in) | NumPy float32 |",
              "|---:|---:|---:|",
              f"| {_cell(query['ours (open set)'])} | {_cell(query.get('LibrEdgeTPU'))} | "
              f"{_cell(query['numpy float32'])} |"]
    return lines


def main() -> None:
    from _libredgetpu import ENV

    lib = libredgetpu()
    where = ("absent (no checkout; set $" + ENV + "), columns skipped" if lib is None
             else "its own code imported from a checkout")
    scenes = _common.load_test_helper("robotics/_flow_scenes.py")
    write_report(RESULTS, render(bench_flow(scenes), bench_reservoir(lib), bench_query(lib), where))


if __name__ == "__main__":
    main()
