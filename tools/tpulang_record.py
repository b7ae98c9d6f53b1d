#!/usr/bin/env python3
"""Write the ``*_origin.mlir`` of ``test/sophgo/tpulang_cases.py`` with Sophgo's own TpuLang 1.30.2.

Runs under CPython 3.10 with the unpacked tpu_mlir wheel (the one ``make tpu-mlir-check`` caches) on the
path, e.g. in a scratch venv outside the repository (numpy<2 psutil filelock plotly pillow
opencv-python-headless flatbuffers tqdm pandas rich):

    C=~/.cache/libredgetpu_ros/tpu_mlir-1.30.2 R=$C/tpu_mlir
    PYTHONPATH=$C:$R/python LD_LIBRARY_PATH=$R/lib:$R/lib/third_party TPUC_ROOT=$R \\
        /tmp/venv310/bin/python tools/tpulang_record.py

Each file is what ``TpuLang.compile`` writes first (``TpuLangConverter.generate_mlir``), saved into
``libredgetpu_ros/test/sophgo/data/tpulang_1.30.2/``; ``test_tpulang_chip.py`` compares our emitter with it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HERE = REPO / "libredgetpu_ros" / "test" / "sophgo"


def main() -> int:
    from tpu_mlir.python.transform import TpuLang as tpul  # noqa: N813 (TpuLang's own alias)
    from tpu_mlir.python.transform.TpuLangConverter import TpuLangConverter

    spec = importlib.util.spec_from_file_location("tpulang_cases", HERE / "tpulang_cases.py")
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    out = HERE / "data" / "tpulang_1.30.2"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        for name, build in cases.CASES.items():
            tpul.init("bm1684x")
            inputs, outputs = build(tpul)
            graph = tpul.TpuLang.graph
            graph.inputs, graph.outputs = inputs, outputs
            graph.quantized_type_inference()  # what TpuLang.compile does before converting
            TpuLangConverter(name=name, graph=graph, mode="quantized").generate_mlir(f"{name}_origin.mlir",
                                                                                   log_level="quiet")
            shutil.copyfile(f"{name}_origin.mlir", out / f"{name}_origin.mlir")
            tpul.deinit()
            print(f"{name}: written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
