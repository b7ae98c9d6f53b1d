#!/usr/bin/env python3
"""Record the bm1684x simulator's outputs for the small graphs of ``test/sophgo/chip_cases.py``.

Each graph is built with this package's TpuLang API, deployed by tpu-mlir 1.30.2 (the pipeline of
``tpu_mlir_check.py``) and run on the wheel's bm1684x cmodel; the outputs go to
``libredgetpu_ros/test/sophgo/data/bm1684x_cmodel.json``, which ``test_tpulang_chip.py`` compares the executor
with in ``make test`` (no tpu-mlir needed there). Opt-in, like ``make tpu-mlir-check``:

    .venv/bin/python tools/tpu_mlir_record.py [--cache DIR] [--only NAME ...]

The recorded numbers are outputs of Sophgo's simulator on inputs of ours; nothing of tpu-mlir itself is
stored.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tpu_mlir_check as check  # a sibling script, not a package

REPO = Path(__file__).resolve().parent.parent
CASES_PY = REPO / "libredgetpu_ros" / "test" / "sophgo" / "chip_cases.py"
OUT = REPO / "libredgetpu_ros" / "test" / "sophgo" / "data" / "bm1684x_cmodel.json"


def load_cases() -> dict:
    spec = importlib.util.spec_from_file_location("chip_cases", CASES_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CASES


def record(name: str, builder, root: Path, env: dict, work: Path) -> dict:
    from libredgetpu_ros.sophgo.emitter import save_module
    from libredgetpu_ros.sophgo.executor import execute
    from libredgetpu_ros.sophgo.ir import TpuLangError

    module, weights, feed = builder()
    mode = "F32" if module.state == "TOP_F32" else "INT8"
    mlir, npz = save_module(module, weights, work / "src")
    result = check.run_case(root, env, module.name, mlir, npz, mode, work)
    if not result.ok:
        return {"mode": mode, "tpu_mlir_fails": f"{result.failed_step}: {result.message}"}
    try:
        template = {k: v for k, v in execute(module, weights, feed).items() if k in module.outputs}
    except TpuLangError as exc:
        raise SystemExit(f"{name}: our executor refuses the graph ({exc})") from None
    bmodel = work / f"{module.name}_{mode.lower()}" / f"{module.name}_{mode.lower()}.bmodel"
    outs = check.cmodel_outputs(root, env, bmodel, module, feed, template, work / f"{name}_cmodel")
    if isinstance(outs, str):
        return {"mode": mode, "tpu_mlir_fails": outs}
    return {"mode": mode, "outputs": {k: {"dtype": str(v.dtype), "shape": list(v.shape),
                                          "values": [None if np.isnan(x) else x for x in v.ravel().tolist()]
                                          if v.dtype.kind == "f" else v.ravel().tolist()}
                                      for k, v in outs.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=check.default_cache())
    parser.add_argument("--wheel", type=Path, default=None)
    parser.add_argument("--only", nargs="*", default=None, help="record these cases, keep the others")
    args = parser.parse_args(argv)
    root = check.ensure_toolchain(args.cache, args.wheel)
    env = check.tool_env(root)
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data["provenance"] = (f"bm1684x cmodel of tpu-mlir {check.VERSION} (pip wheel "
                          f"tpu_mlir=={check.VERSION}), run through libbmrt by tools/tpu_mlir_record.py "
                          "on graphs of "
                          "libredgetpu_ros/test/sophgo/chip_cases.py")
    cases = data.setdefault("cases", {})
    with tempfile.TemporaryDirectory(prefix="tpu_mlir_record_") as tmp:
        for name, builder in load_cases().items():
            if args.only and name not in args.only:
                continue
            cases[name] = record(name, builder, root, env, Path(tmp) / name)
            print(f"{name}: {'recorded' if 'outputs' in cases[name] else cases[name]['tpu_mlir_fails']}")
    # one case per line: small diffs when a case is re-recorded
    lines = [f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(cases.items())]
    OUT.write_text(f'{{"provenance": {json.dumps(data["provenance"])},\n"cases": {{\n' + ",\n".join(lines)
                   + "\n}}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
