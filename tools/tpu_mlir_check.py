#!/usr/bin/env python3
"""Deploy our TpuLang exports and the TpuLang fixture cases to a bm1684x bmodel with Sophgo's tpu-mlir 1.30.2.

Not part of ``make test`` (it needs the 311 MB tpu-mlir wheel): ``make tpu-mlir-check``.

tpu-mlir 1.30.2 exists only as a ``py3-none-any`` wheel requiring Python 3.10, whose Python modules (pymlir,
pyruntime_bm, model_deploy.py) are built for CPython 3.10. Its native tools run on any x86-64 Linux once the
glibc 2.35 copies it bundles are out of the library path, so this script runs the pass pipelines of
``python/utils/mlir_shell.py`` (what ``TpuLang.compile`` / ``model_deploy.py`` call) with ``tpuc-opt``:

  origin MLIR -> Top (struct-optimize, shape-infer, canonicalize, extra-optimize)
  -> TPU (processor-assign chip=bm1684x mode=INT8|F32, processor-top-optimize, convert-top-to-tpu, ...)
  -> final (strip-io-quant, processor-tpu-optimize, weight-reorder, subnet-divide, layer-group,
     address-assign) -> codegen -> .bmodel, read back with ``model_tool --info``.

Running the bmodel on tpu-mlir's cmodel needs pyruntime_bm (CPython 3.10 only): reported as not run.

The wheel is unpacked into a cache folder outside the repository (``--cache``, default
``~/.cache/libredgetpu_ros/tpu_mlir-1.30.2``); ``pip download`` fetches it when absent. Nothing of it is
ever written into the repository.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

VERSION = "1.30.2"
WHEEL = f"tpu_mlir-{VERSION}-py3-none-any.whl"
BUNDLED_GLIBC = ("libc.so.6", "libm.so.6", "libpthread.so.0")  # glibc 2.35: tpuc-opt dies "stack smashing"
CHIP = "bm1684x"
STEP_TIMEOUT_S = 600


@dataclass
class Step:
    name: str
    args: list[str]


@dataclass
class Result:
    case: str
    mode: str
    ok: bool
    failed_step: str
    message: str
    seconds: float
    info: str


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "libredgetpu_ros" / f"tpu_mlir-{VERSION}"


def ensure_toolchain(cache: Path, wheel: Path | None) -> Path:
    """The unpacked wheel's ``tpu_mlir`` folder (TPUC_ROOT), unpacking/downloading it first if needed."""
    root = cache / "tpu_mlir"
    marker = cache / ".unpacked"
    if not marker.exists():
        cache.mkdir(parents=True, exist_ok=True)
        if wheel is None:
            wheel = cache / WHEEL
            if not wheel.exists():
                print(f"downloading {WHEEL} (311 MB) into {cache}", flush=True)
                subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--python-version",
                                "3.10", "--only-binary=:all:", f"tpu_mlir=={VERSION}", "-d", str(cache)],
                               check=True)
        print(f"unpacking {wheel} into {cache}", flush=True)
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(cache)
        for tool in ("tpuc-opt", "tpuc-tool", "model_tool"):
            (root / "bin" / tool).chmod(0o755)
        marker.write_text(str(wheel) + "\n")
    aside = root / "lib" / "third_party" / "glibc-2.35-aside"
    aside.mkdir(exist_ok=True)
    for name in BUNDLED_GLIBC:
        lib = root / "lib" / "third_party" / name
        if lib.exists():
            lib.replace(aside / name)
    return root


def tool_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TPUC_ROOT"] = str(root)  # codegen reads it (a missing one is a std::logic_error abort)
    env["LD_LIBRARY_PATH"] = ":".join(str(root / sub) for sub in ("lib", "lib/capi", "lib/third_party"))
    env["PATH"] = f"{root / 'bin'}:{env.get('PATH', '')}"
    return env


def steps(name: str, mode: str) -> list[Step]:
    """mlir_shell.py's mlir_opt_for_top, mlir_lowering, mlir_to_model (opt=2) and codegen options."""
    top, tpu = f"{name}.mlir", f"{name}_{mode.lower()}.mlir"
    final, bmodel = f"{name}_{mode.lower()}_final.mlir", f"{name}_{mode.lower()}.bmodel"
    return [
        Step("top", [f"{name}_origin.mlir", "--struct-optimize", "--shape-infer", "--canonicalize",
                     "--extra-optimize", "-o", top]),
        Step("lowering", [top, f"--processor-assign=chip={CHIP} mode={mode} num_device=1 num_core=1 "
                               "addr_mode=auto high_precision=False",
                          "--processor-top-optimize",
                          f"--convert-top-to-tpu=weightFileName={name}_{mode.lower()}_weights.npz "
                          "asymmetric=False doWinograd=False q_group_size=0 q_symmetric=False "
                          "matmul_perchannel=False gelu_mode=normal",
                          "--canonicalize", "--weight-fold", "-o", tpu]),
        Step("tpu-opt", [tpu, "--mlir-disable-threading",
                         "--strip-io-quant=quant_input=False quant_output=False quant_input_list= "
                         "quant_output_list= quant_output_bf16=False quant_input_int8=False "
                         "quant_output_int8=False ",
                         "--processor-tpu-optimize", "--dev-parallel", "--weight-reorder",
                         "--subnet-divide=dynamic=False", "--op-reorder",
                         "--layer-group=opt=2 group_by_cores=auto compress_mode=none debugger=0 "
                         "disable_group_overlap=false lgcache=true config_filename= enable_lghash=False "
                         "lghash_dir=",
                         "--core-parallel", "--after-layergroup-weight-reorder", "--address-assign",
                         "-o", final]),
        Step("codegen", [final, f"--codegen=model_file={bmodel} embed_debug_info=False model_version=latest "
                                "bmodel_only=False gdma_check=False rvti=False", "-o", "/dev/null"]),
    ]


def tool_message(output: str) -> str:
    """The line that says why: an assertion, an error, an UNREACHABLE; else the last non-trace line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    keys = ("Assertion", "error:", "Error", "UNREACHABLE", "what():", "FATAL", "failed", "missmatch",
            "mismatch", "not support")
    for line in lines:
        if any(k in line for k in keys) and not line.startswith("#"):
            return line[:300]
    trace = [ln for ln in lines if not ln.startswith("#") and not ln.startswith("Stack dump")]
    return (trace[-1] if trace else "")[:300]


def bmodel_summary(info: str) -> str:
    keep = [ln.strip() for ln in info.splitlines() if ln.strip().startswith(("chip:", "input:", "output:",
                                                                               "device mem size"))]
    return "; ".join(keep)


def run_case(root: Path, env: dict[str, str], name: str, mlir: Path, weights: Path, mode: str,
             work: Path) -> Result:
    folder = work / f"{name}_{mode.lower()}"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(mlir, folder / f"{name}_origin.mlir")
    shutil.copyfile(weights, folder / weights.name)
    start = time.monotonic()
    for step in steps(name, mode):
        proc = subprocess.run([str(root / "bin" / "tpuc-opt"), *step.args], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
        if proc.returncode != 0:
            return Result(name, mode, False, step.name, tool_message(proc.stdout + "\n" + proc.stderr),
                          time.monotonic() - start, "")
    bmodel = folder / f"{name}_{mode.lower()}.bmodel"
    info = subprocess.run([str(root / "bin" / "model_tool"), "--info", str(bmodel)], env=env,
                          capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    ok = bmodel.exists() and info.returncode == 0 and CHIP.upper() in info.stdout
    message = "" if ok else tool_message(info.stdout + info.stderr)
    return Result(name, mode, ok, "" if ok else "model_tool", message, time.monotonic() - start,
                  bmodel_summary(info.stdout))


def export_cases(out: Path) -> list[tuple[str, Path, Path, str]]:
    """Our two exports written the way ``export-tpulang`` writes them."""
    from libredgetpu_ros.fixtures import fixture
    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.sophgo.emitter import save_module
    from libredgetpu_ros.sophgo.export_dense import export_engine
    from libredgetpu_ros.sophgo.export_tflite import export_classifier

    cases = []
    module, weights = export_classifier(fixture("classify/mobilenet_v1_0.25_128_quant.tflite"))
    mlir, npz = save_module(module, weights, out / "export_classifier")
    cases.append((module.name, mlir, npz, "INT8"))
    for template in (256,):
        engine = MatMulEngine.from_template(template, backend="cpu")
        module, weights = export_engine(engine, name=f"dense{template}")
        mlir, npz = save_module(module, weights, out / f"export_dense{template}")
        cases.append((module.name, mlir, npz, "INT8"))
    return cases


def fixture_cases(folder: Path) -> list[tuple[str, Path, Path, str]]:
    cases = []
    for case in sorted(p for p in folder.iterdir() if p.is_dir()):
        mlir = case / f"{case.name}_origin.mlir"
        weights = sorted(case.glob(f"{case.name}_top_*_all_origin_weight.npz"))
        if mlir.exists() and weights:
            mode = "F32" if "_top_f32_" in weights[0].name else "INT8"
            cases.append((case.name, mlir, weights[0], mode))
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=default_cache(), help="where the wheel is unpacked")
    parser.add_argument("--wheel", type=Path, default=None, help="a local tpu_mlir 1.30.2 wheel")
    parser.add_argument("--work", type=Path, default=None, help="keep the tool outputs here (default: temp)")
    parser.add_argument("--out", type=Path, default=None, help="also write the table (markdown) here")
    args = parser.parse_args(argv)
    from libredgetpu_ros.fixtures import fixtures_dir

    root = ensure_toolchain(args.cache, args.wheel)
    env = tool_env(root)
    with tempfile.TemporaryDirectory(prefix="tpu_mlir_check_") as tmp:
        work = args.work or Path(tmp)
        cases = export_cases(work / "exports") + fixture_cases(fixtures_dir() / "tpulang")
        results = [run_case(root, env, *case, work) for case in cases]
    lines = [f"tpu-mlir {VERSION} (native tpuc-opt from {root}), chip {CHIP}", "",
             "| case | mode | bmodel | failed step | tool message | s | bmodel (model_tool --info) |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.case} | {r.mode} | {'pass' if r.ok else 'FAIL'} | {r.failed_step} | "
                     f"{r.message.replace('|', '/')} | {r.seconds:.1f} | {r.info.replace('|', '/')} |")
    passed = sum(r.ok for r in results)
    lines += ["", f"{passed}/{len(results)} cases reach a bmodel. cmodel run: not run (needs tpu-mlir's "
              "pyruntime_bm, CPython 3.10 only)."]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
