"""``libredgetpu-ros robotics embed`` and ``robotics reservoir fit|predict``: modules that learn on the robot.

Registered in ``robotics_cmd`` as commands with their own inputs (no template/IMAGE options of the image
modules). ``embed`` enrols ``NAME=IMAGE`` pairs (or a saved database) and answers each ``--query IMAGE`` with
its top-k labels and cosine scores. ``reservoir fit`` reads a CSV or NPZ time series, fits a one-step-ahead
readout and saves it; ``reservoir predict`` loads it and predicts another series (NRMSE when it has a next
step to compare with).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from libredgetpu_ros.backend_kinds import BACKEND_KINDS
from libredgetpu_ros.cli.robotics_registry import RoboticsCommand
from libredgetpu_ros.errors import InputError
from libredgetpu_ros.models.template_catalogue import EXTRACTOR

MAX_SERIES_BYTES = 256 << 20


# -- embed ----------------------------------------------------------------------------------------------
def _embed_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="embedding extractor (*_edgetpu.tflite; default: the catalogue's "
                                        f"{EXTRACTOR}, found like a template: model cache, "
                                        "$LIBREDGETPU_ROS_TEMPLATES, fixtures)")
    parser.add_argument("--backend", choices=BACKEND_KINDS, default="auto",
                        help="extractor and MatMul backend: auto = the Edge TPU if attached, else the CPU "
                             "twin")
    parser.add_argument("--device", help="which Edge TPU (index or USB bus path)")
    parser.add_argument("--template", type=int, default=1024, choices=(256, 512, 1024),
                        help="Dense(N) template holding the database (capacity: N entries of 1024-d at "
                             "N=1024, N*N/1024 below)")
    parser.add_argument("--enroll", action="append", default=[], metavar="NAME=IMAGE",
                        help="enrol IMAGE under NAME (repeatable; a name may have several images)")
    parser.add_argument("--database", type=Path, help="load this saved database before enrolling")
    parser.add_argument("--save", type=Path, help="write the database here after enrolling")
    parser.add_argument("--query", action="append", default=[], metavar="IMAGE", help="image to recognise "
                                                                                      "(repeatable)")
    parser.add_argument("--top-k", type=int, default=1, help="labels per query (default 1)")
    parser.add_argument("--open-set-margin", type=float, default=0.2,
                        help="'unknown' unless the best cosine reaches background + MARGIN * (1 - "
                             "background), background = the highest cosine between entries of different "
                             "labels (default 0.2)")
    parser.add_argument("--closed-set", action="store_true", help="always name the nearest enrolled label")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _pairs(values: list[str]) -> list[tuple[str, Path]]:
    from libredgetpu_ros.robotics.embedding import check_label

    pairs = []
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name.strip() or not path:
            raise InputError(f"--enroll takes NAME=IMAGE, got {value[:80]!r}")
        pairs.append((check_label(name), Path(path)))  # before any image is read
    return pairs


def _embed_run(args: argparse.Namespace, _images: list[Any]) -> int:
    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.perception.images import load_image
    from libredgetpu_ros.robotics.embedding import EmbeddingSimilarity
    from libredgetpu_ros.robotics.extractor import EmbeddingExtractor

    if args.top_k < 1:
        raise InputError(f"--top-k must be >= 1, got {args.top_k}")
    if not 0.0 <= args.open_set_margin <= 1.0:
        raise InputError(f"--open-set-margin must be in [0, 1], got {args.open_set_margin}")
    enrol = [(name, load_image(path)) for name, path in _pairs(args.enroll)]  # every file read up front
    queries = [(path, load_image(path)) for path in args.query]
    if not enrol and args.database is None:
        raise InputError("nothing to compare with: give --enroll NAME=IMAGE or --database FILE")
    with EmbeddingExtractor(args.model, backend=args.backend, device=args.device) as extractor, \
            MatMulEngine.from_template(args.template, backend=args.backend, device=args.device) as engine:
        db = EmbeddingSimilarity(engine, extractor.dim)
        if args.database is not None:
            db.load(args.database)
        if enrol:
            db.add_many([(name, extractor.embed(rgb)) for name, rgb in enrol])
        if args.save is not None:
            db.save(args.save)
        results = []
        margin = None if args.closed_set else args.open_set_margin
        for path, rgb in queries:
            embedding = extractor.embed(rgb)
            decision = db.classify(embedding, top_k=args.top_k, margin=margin)
            matches = db.query(embedding, top_k=args.top_k)  # the ranking, known or not
            results.append({"image": path, "label": decision.label, "score": round(decision.score, 4),
                            "threshold": round(decision.threshold, 4),
                            "matches": [{"label": m.label, "score": round(m.score, 4)} for m in matches]})
        report = {"module": "embed", "template": f"dense_{args.template}",
                  "extractor": str(extractor.model_path), "backend": extractor.backend_name,
                  "entries": len(db), "capacity": db.capacity, "results": results}
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(f"embed: {report['entries']} entries of {report['capacity']} on {report['template']} "
              f"({report['backend']})")
        for entry in results:
            shown = ", ".join(f"{m['label']} {m['score']:.3f}" for m in entry["matches"])
            print(f"  {entry['image']}: {entry['label']} {entry['score']:.3f} "
                  f"(threshold {entry['threshold']:.3f}; nearest: {shown})")
    return 0


# -- reservoir ------------------------------------------------------------------------------------------
def _reservoir_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    fit = sub.add_parser("fit", help="fit a one-step-ahead readout on a time series and save it")
    predict = sub.add_parser("predict", help="predict a time series with a saved readout")
    for p in (fit, predict):
        p.add_argument("series", type=Path, help="CSV (one row per step, numeric columns; a header row is "
                                                 "skipped) or NPZ (array 'series', or the only array)")
        p.add_argument("--template", type=int, default=256, choices=(256, 512, 1024), help="reservoir size N")
        p.add_argument("--backend", choices=BACKEND_KINDS, default="auto")
        p.add_argument("--device", help="which Edge TPU (index or USB bus path)")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--spectral-radius", type=float, default=0.9)
        p.add_argument("--input-scaling", type=float, default=0.5)
        p.add_argument("--leak-rate", type=float, default=1.0)
        p.add_argument("--activation", choices=("tanh", "relu", "identity"), default="tanh")
        p.add_argument("--washout", type=int, default=100)
        p.add_argument("--ridge", type=float, default=1e-6)
        p.add_argument("--passes", type=int, default=1,
                       help="engine rows per step: 1 = one int8 pass; 3-64 = dithered passes + a low pass, "
                            "near float64 accuracy at that many times the engine work")
        p.add_argument("--json", action="store_true", help="print JSON instead of text")
    fit.add_argument("--out", type=Path, required=True, help="readout file to write (.npz)")
    predict.add_argument("--readout", type=Path, required=True, help="readout file written by fit")
    predict.add_argument("--out", type=Path, help="write the predictions here (CSV)")


def read_series(path: Path) -> Any:
    """(T, M) float64 time series from a CSV or NPZ file; InputError naming the file and the problem."""
    import numpy as np

    from libredgetpu_ros.paths import check_regular, read_regular

    try:
        check_regular(path, "time series", MAX_SERIES_BYTES)  # a FIFO or a device would block or never end
        if path.suffix == ".npz":
            from libredgetpu_ros.npyfile import read_npz

            arrays = read_npz(path, "time series", max_bytes=MAX_SERIES_BYTES)
            key = "series" if "series" in arrays else (next(iter(arrays)) if len(arrays) == 1 else None)
            if key is None:
                raise InputError(f"{path}: holds {sorted(arrays)}; name the array 'series'")
            series = np.asarray(arrays[key], dtype=np.float64)
        else:
            text = read_regular(path, "time series", MAX_SERIES_BYTES).decode("utf-8")
            lines = [line for line in text.splitlines() if line.strip()]
            if lines and any(c.isalpha() and c not in "eE" for c in lines[0]):
                lines = lines[1:]  # header row
            series = np.array([[float(v) for v in line.split(",")] for line in lines], dtype=np.float64)
    except InputError:
        raise
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read a numeric time series: {exc}") from exc
    if series.ndim == 1:
        series = series[:, None]
    if series.ndim != 2 or len(series) < 2:
        raise InputError(f"{path}: a time series needs >= 2 steps of one or more columns, got {series.shape}")
    return series


def _reservoir_run(args: argparse.Namespace, _images: list[Any]) -> int:
    import numpy as np

    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.robotics.reservoir import ReservoirComputer, ReservoirConfig, nrmse

    series = read_series(args.series)
    config = ReservoirConfig(input_dim=series.shape[1], spectral_radius=args.spectral_radius,
                             input_scaling=args.input_scaling, leak_rate=args.leak_rate,
                             activation=args.activation, seed=args.seed, ridge=args.ridge,
                             washout=args.washout, passes=args.passes)
    inputs, targets = series[:-1], series[1:]
    with MatMulEngine.from_template(args.template, backend=args.backend, device=args.device) as engine:
        rc = ReservoirComputer(engine, config)
        report: dict[str, Any] = {"module": "reservoir", "action": args.action, "series": str(args.series),
                                  "steps": len(series), "columns": series.shape[1], "size": rc.size,
                                  "backend": engine.backend}
        if args.action == "fit":
            fit = rc.fit(inputs, targets)
            rc.save_readout(args.out)
            report.update(samples=fit.samples, washout=fit.washout, train_nrmse=round(fit.train_nrmse, 5),
                          readout=str(args.out))
        else:
            rc.load_readout(args.readout, outputs=series.shape[1])  # one output per column: the next step
            predicted = rc.predict(inputs)
            scored = slice(min(args.washout, len(inputs) - 1), None)
            error = nrmse(predicted[scored], targets[scored])
            report.update(readout=str(args.readout), nrmse=round(error, 5), scored_from_step=scored.start)
            if args.out is not None:
                from libredgetpu_ros.atomicio import atomic_open

                with atomic_open(args.out, "w") as handle:
                    np.savetxt(handle, predicted, delimiter=",", fmt="%.9g")
                report["out"] = str(args.out)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(", ".join(f"{k}={v}" for k, v in report.items()))
    return 0


def commands() -> list[RoboticsCommand]:
    return [
        RoboticsCommand("embed", "place / object recognition: enrol NAME=IMAGE, query images (top-k cosine)",
                        _embed_arguments, _embed_run, own_inputs=True),
        RoboticsCommand("reservoir", "echo state network on a CSV/NPZ time series: fit a readout, predict",
                        _reservoir_arguments, _reservoir_run, own_inputs=True),
    ]
