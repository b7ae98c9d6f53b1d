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

Each bmodel is then run on the wheel's bm1684x cmodel (the chip simulator behind ``libbmlib.so``) through
the C API of its runtime ``libbmrt.so`` (``bm_dev_request``, ``bmrt_create``, ``bmrt_load_bmodel``,
``bmrt_launch_data``) with ctypes, in a child process whose library path is set before it starts: tpu-mlir's
own Python binding of that runtime (pyruntime_bm) is CPython 3.10 only. The outputs are compared with this
package's NumPy executor on the same origin MLIR and inputs (integers exactly, floats within 1e-5), and for
the fixture cases with tpu-mlir's reference outputs too.

The wheel is unpacked into a cache folder outside the repository (``--cache``, default
``~/.cache/libredgetpu_ros/tpu_mlir-1.30.2``); ``pip download`` fetches it when absent. Nothing of it is
ever written into the repository.
"""

from __future__ import annotations

import argparse
import ctypes
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
REFUSED = "refused by our executor: "


@dataclass
class Step:
    name: str
    args: list[str]


@dataclass
class Case:
    name: str
    mlir: Path
    weights: Path
    mode: str  # INT8 or F32 lowering
    inputs: list[dict]
    refs: list[dict] | None = None  # an independent reference per input, if any
    ref_label: str = "tpu-mlir reference"
    ref_atol: float = 1e-5


@dataclass
class Result:
    case: str
    mode: str
    ok: bool
    failed_step: str
    message: str
    seconds: float
    info: str
    run: str = "not run"


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
    keys = ("ASSERT INFO:", "ERROR", "Assertion", "[ERR]", "error:", "Error", "UNREACHABLE", "what():",
            "FATAL", "does not match", "missmatch", "mismatch", "not support", "failed")
    lines = [ln for ln in lines if not ln.startswith("#") and "(+0x" not in ln]  # stack frames
    for key in keys:  # the most specific kind of line first
        for line in lines:
            if key in line:
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


class _Shape(ctypes.Structure):
    _fields_ = [("num_dims", ctypes.c_int), ("dims", ctypes.c_int * 8)]  # bm_shape_t, BM_MAX_DIMS_NUM 8


def cmodel_child(root: Path, bmodel: Path, net: str, inputs_npz: Path, outputs_npz: Path) -> None:
    """Run one bmodel on the cmodel (in a child process started with tool_env's LD_LIBRARY_PATH).

    ``outputs_npz`` holds zero arrays of the expected dtypes and shapes, in the net's output order; they
    are overwritten with the cmodel's outputs (``bmrt_launch_data`` with user-allocated outputs)."""
    import numpy as np

    bmlib = ctypes.CDLL(str(root / "lib" / "libbmlib.so"), mode=ctypes.RTLD_GLOBAL)
    bmrt = ctypes.CDLL(str(root / "lib" / "libbmrt.so"), mode=ctypes.RTLD_GLOBAL)
    bmrt.bmrt_create.restype = ctypes.c_void_p
    bmrt.bmrt_create.argtypes = [ctypes.c_void_p]
    bmrt.bmrt_load_bmodel.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    bmrt.bmrt_load_bmodel.restype = ctypes.c_bool
    bmrt.bmrt_launch_data.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                                      ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                      ctypes.c_bool]
    bmrt.bmrt_launch_data.restype = ctypes.c_bool
    bmrt.bmrt_destroy.argtypes = [ctypes.c_void_p]
    handle = ctypes.c_void_p()
    if bmlib.bm_dev_request(ctypes.byref(handle), 0) != 0:
        raise SystemExit("bm_dev_request failed (cmodel)")
    runtime = bmrt.bmrt_create(handle)
    if not runtime or not bmrt.bmrt_load_bmodel(runtime, str(bmodel).encode()):
        raise SystemExit(f"bmrt_load_bmodel failed: {bmodel}")
    with np.load(inputs_npz) as data:
        ins = [np.ascontiguousarray(data[k]) for k in data.files]
    with np.load(outputs_npz) as data:
        names = list(data.files)
        outs = [np.ascontiguousarray(np.zeros_like(data[k])) for k in names]
    shapes = (_Shape * len(ins))()
    for shape, array in zip(shapes, ins, strict=True):
        shape.num_dims = array.ndim
        for i, d in enumerate(array.shape):
            shape.dims[i] = d
    in_ptrs = (ctypes.c_void_p * len(ins))(*[a.ctypes.data for a in ins])
    out_ptrs = (ctypes.c_void_p * len(outs))(*[a.ctypes.data for a in outs])
    out_shapes = (_Shape * len(outs))()
    if not bmrt.bmrt_launch_data(runtime, net.encode(), in_ptrs, shapes, len(ins), out_ptrs, out_shapes,
                                 len(outs), True):
        raise SystemExit("bmrt_launch_data failed")
    bmlib.bm_thread_sync(handle)
    for shape, array, name in zip(out_shapes, outs, names, strict=True):
        got = tuple(shape.dims[i] for i in range(shape.num_dims))
        if got != array.shape:
            raise SystemExit(f"output {name}: cmodel shape {got}, expected {array.shape}")
    bmrt.bmrt_destroy(runtime)
    np.savez(outputs_npz, **dict(zip(names, outs, strict=True)))


def compare(ours: dict, theirs: dict, atol: float = 1e-5) -> tuple[bool, str]:
    """(equal, note). A NaN from the cmodel where we give 0 is listed apart, not failed: bm1684x averages a
    window wholly in ceil_mode padding (no cell counted) to NaN, tpu-mlir's interpreter and ours to 0."""
    import numpy as np

    worst, equal, empty = 0.0, True, 0
    for name, want in ours.items():
        got = theirs[name]
        if not np.issubdtype(want.dtype, np.integer):
            hole = np.isnan(got) & (want == 0)
            empty += int(hole.sum())
            got = np.where(hole, 0, got)
        if np.issubdtype(want.dtype, np.integer):
            diff = int(np.abs(got.astype(np.int64) - want.astype(np.int64)).max())
            equal &= diff == 0
            worst = max(worst, diff)
        else:
            diff = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max())
            equal &= bool(np.allclose(got, want, atol=atol, rtol=1e-5 if atol <= 1e-5 else 0))
            worst = max(worst, diff)
    note = f"max |diff| {worst:.3g}"
    if empty:
        note += f", {empty} empty-window NaN on the cmodel where ours is 0"
    return equal, note


def run_on_cmodel(root: Path, env: dict[str, str], case: Case, work: Path) -> str:
    """Run the bmodel on every input set; compare with our executor (and the case's reference if any)."""
    import numpy as np
    from libredgetpu_ros.sophgo.executor import execute
    from libredgetpu_ros.sophgo.ir import TpuLangError
    from libredgetpu_ros.sophgo.parser import load_mlir

    folder = work / f"{case.name}_{case.mode.lower()}"
    module = load_mlir(case.mlir)
    with np.load(case.weights) as data:
        arrays = {k: data[k] for k in data.files}
    notes, ours_ok, ref_ok = [], True, True
    for index, feed in enumerate(case.inputs):
        try:
            ours = execute(module, arrays, feed)
        except TpuLangError as exc:  # a graph the executor refuses (docs/sophgo.md says why)
            return f"{REFUSED}{exc}"
        theirs = cmodel_outputs(root, env, folder / f"{case.name}_{case.mode.lower()}.bmodel", module, feed,
                                {k: ours[k] for k in module.outputs}, folder / f"cmodel_{index}")
        if isinstance(theirs, str):
            return theirs
        ok, note = compare(ours, theirs)
        ours_ok &= ok
        if case.refs is not None:
            ok, ref_note = compare(case.refs[index], theirs, case.ref_atol)
            ref_ok &= ok
            note += f" (vs {case.ref_label}: {ref_note}{'' if ok else ', OUT OF TOLERANCE'})"
        notes.append(note)
    verdict = "= our executor" if ours_ok and ref_ok else (
        "DIFFERS from our executor" if not ours_ok else "= our executor but not the reference")
    return f"cmodel {verdict} on {len(case.inputs)} input(s): {'; '.join(dict.fromkeys(notes))}"


def cmodel_outputs(root: Path, env: dict[str, str], bmodel: Path, module, feed: dict, template: dict,
                   stem: Path) -> dict | str:
    """The bmodel's outputs on the cmodel for one input set (``template``: arrays of the expected dtypes and
    shapes, in output order), or a ``cmodel FAIL: ...`` line."""
    import numpy as np

    in_npz, out_npz = stem.with_name(stem.name + "_in.npz"), stem.with_name(stem.name + "_out.npz")
    np.savez(in_npz, **{k: feed[k] for k, _ in module.inputs})
    np.savez(out_npz, **template)
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--cmodel-child", str(root),
                           str(bmodel), module.name, str(in_npz), str(out_npz)], env=env,
                          capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    if proc.returncode != 0:
        return f"cmodel FAIL: {tool_message(proc.stdout + proc.stderr)}"
    with np.load(out_npz) as data:
        return {k: data[k] for k in data.files}


def litert_probabilities(model: Path, images: list) -> list[dict]:
    """LiteRT's uint8 softmax of the TFLite model, as float probabilities (the export's origin)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(model))
    interpreter.allocate_tensors()
    index_in = interpreter.get_input_details()[0]["index"]
    detail = interpreter.get_output_details()[0]
    scale, zero_point = detail["quantization"]
    refs = []
    for image in images:
        interpreter.set_tensor(index_in, image)
        interpreter.invoke()
        raw = interpreter.get_tensor(detail["index"]).astype("float32")
        refs.append({"probabilities": (raw - zero_point) * scale})
    return refs


def export_cases(out: Path) -> list[Case]:
    """Our two exports written the way ``export-tpulang`` writes them, with inputs to run them on."""
    import cv2
    import numpy as np
    from libredgetpu_ros.fixtures import fixture
    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.perception.images import load_image
    from libredgetpu_ros.sophgo.emitter import save_module
    from libredgetpu_ros.sophgo.export_dense import dense_graph, export_engine
    from libredgetpu_ros.sophgo.export_tflite import export_classifier

    cases = []
    module, weights = export_classifier(fixture("classify/mobilenet_v1_0.25_128_quant.tflite"))
    mlir, npz = save_module(module, weights, out / "export_classifier")
    photos = [cv2.resize(load_image(fixture(p)), (128, 128), interpolation=cv2.INTER_AREA)[None]
              for p in ("images/cat.bmp", "images/grace_hopper.bmp", "images/test_couple.jpg")]
    model = fixture("classify/mobilenet_v1_0.25_128_quant.tflite")
    # vs LiteRT on the TFLite file: within one step of its uint8 output (1/256), as the tests require
    cases.append(Case(module.name, mlir, npz, "INT8", [{"image": p} for p in photos],
                      litert_probabilities(model, photos), "LiteRT on the .tflite", 1.0 / 256 + 1e-6))
    rng = np.random.default_rng(23)
    for template, batch in ((256, 1), (256, 4), (512, 1), (1024, 1)):
        engine = MatMulEngine.from_template(template, backend="cpu")
        lo, hi = engine.weight_range()
        weights = rng.uniform(lo[:, None], hi[:, None], size=(template, template)).astype(np.float32)
        engine.set_weights(weights, rng.uniform(-1, 1, template).astype(np.float32))
        module, weights = export_engine(engine, batch=batch, name=f"dense{template}_b{batch}")
        mlir, npz = save_module(module, weights, out / module.name)
        feeds = [{"x": rng.uniform(-1.2, 1.2, size=(batch, template)).astype(np.float32)} for _ in range(3)]
        cases.append(Case(module.name, mlir, npz, "INT8", feeds))
    # the uint8 core the tpulang MatMul backend runs (uint8 in, uint8 out), random int8 weights
    quant = MatMulEngine.from_template(256, backend="cpu").quantization
    core, weights = dense_graph(rng.integers(-128, 128, size=(256, 256), dtype=np.int8), quant, batch=2,
                                float_io=False, name="dense256_core_b2")
    mlir, npz = save_module(core, weights, out / core.name)
    feeds = [{"x": rng.integers(0, 256, size=(2, 256), dtype=np.uint8)} for _ in range(3)]
    cases.append(Case(core.name, mlir, npz, "INT8", feeds))
    cases.append(ceil_pool_case(out, rng))
    return cases


def ceil_pool_case(out: Path, rng) -> Case:
    """Pools where tpu-mlir's shape rules differ from the usual ones: ceil_mode (a padded maxpool of 7x8 is
    2x4, not 3x5; avgpools with windows wholly in the added padding, counting pads or not) and kernel=None (a
    global pool whatever the strides and pads)."""
    import numpy as np
    from libredgetpu_ros.sophgo.emitter import save_module

    from libredgetpu_ros import sophgo as tpul

    tpul.init(CHIP)
    a = tpul.Tensor([1, 2, 7, 8], name="a")
    b = tpul.Tensor([1, 2, 6, 6], name="b")
    outs = [tpul.maxpool2d(a, [3, 2], [3, 2], [1, 1, 0, 0], ceil_mode=True, out_name="max_7x8"),
            tpul.maxpool2d(b, [3, 3], [2, 2], [0, 0, 2, 2], ceil_mode=True, out_name="max_overhang"),
            tpul.avgpool2d(b, [3, 3], [2, 2], [0, 0, 2, 2], ceil_mode=True, out_name="avg_overhang"),
            tpul.avgpool2d(b, [3, 3], [2, 2], [0, 0, 2, 2], ceil_mode=True, count_include_pad=True,
                           out_name="avg_overhang_counted"),
            # kernel=None: kernel_shape = [], a global pool whatever the strides and pads
            tpul.avgpool2d(a, None, [2, 2], [1, 1, 1, 1], out_name="avg_global"),
            tpul.maxpool2d(b, None, [2, 2], [1, 1, 1, 1], out_name="max_global")]
    module, weights = tpul.build("pool_rules", [a, b], outs, quantized=False)
    tpul.deinit()
    mlir, npz = save_module(module, weights, out / module.name)
    feeds = [{"a": rng.standard_normal((1, 2, 7, 8)).astype(np.float32),
              "b": rng.standard_normal((1, 2, 6, 6)).astype(np.float32)} for _ in range(2)]
    return Case(module.name, mlir, npz, "F32", feeds)


def fixture_cases(folder: Path) -> list[Case]:
    import numpy as np

    cases = []
    for case in sorted(p for p in folder.iterdir() if p.is_dir()):
        mlir = case / f"{case.name}_origin.mlir"
        weights = sorted(case.glob(f"{case.name}_top_*_all_origin_weight.npz"))
        if mlir.exists() and weights:
            mode = "F32" if "_top_f32_" in weights[0].name else "INT8"
            feed_path, ref_path = case / f"{case.name}_in.npz", case / f"{case.name}_ref_out.npz"
            with np.load(feed_path) as feed, np.load(ref_path) as ref:
                inputs, refs = [{k: feed[k] for k in feed.files}], [{k: ref[k] for k in ref.files}]
            cases.append(Case(case.name, mlir, weights[0], mode, inputs, refs))
    # the loose single examples (no inputs or references shipped: random inputs, our executor only)
    from libredgetpu_ros.sophgo.parser import load_mlir

    rng = np.random.default_rng(5)
    for mlir in sorted(folder.glob("*_origin.mlir")):
        name = mlir.name[: -len("_origin.mlir")]
        weights = sorted(folder.glob(f"{name}_top_*_all_origin_weight.npz"))
        if not weights:
            continue  # q2_origin.mlir ships without its weights
        feed = {}
        for input_name, ttype in load_mlir(mlir).inputs:
            dtype = np.dtype(ttype.np_dtype)
            feed[input_name] = (rng.standard_normal(ttype.shape).astype(dtype) if dtype.kind == "f" else
                                rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, ttype.shape,
                                             dtype=dtype))
        mode = "F32" if "_top_f32_" in weights[0].name else "INT8"
        cases.append(Case(name, mlir, weights[0], mode, [feed]))
    return cases


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--cmodel-child"]:
        root, bmodel, net, inputs_npz, outputs_npz = argv[1:6]
        cmodel_child(Path(root), Path(bmodel), net, Path(inputs_npz), Path(outputs_npz))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=default_cache(), help="where the wheel is unpacked")
    parser.add_argument("--wheel", type=Path, default=None, help="a local tpu_mlir 1.30.2 wheel")
    parser.add_argument("--work", type=Path, default=None, help="keep the tool outputs here (default: temp)")
    parser.add_argument("--out", type=Path, default=None, help="also write the table (markdown) here")
    args = parser.parse_args(argv)
    from libredgetpu_ros.fixtures import fixtures_dir

    root = ensure_toolchain(args.cache, args.wheel)
    env = tool_env(root)
    results = []
    with tempfile.TemporaryDirectory(prefix="tpu_mlir_check_") as tmp:
        work = args.work or Path(tmp)
        cases = export_cases(work / "exports") + fixture_cases(fixtures_dir() / "tpulang")
        for case in cases:
            result = run_case(root, env, case.name, case.mlir, case.weights, case.mode, work)
            if result.ok:
                result.run = run_on_cmodel(root, env, case, work)
            results.append(result)
    lines = [f"tpu-mlir {VERSION} (native tpuc-opt, libbmrt + bm1684x cmodel from {root}), chip {CHIP}", "",
             "| case | mode | bmodel | failed step | tool message | s | cmodel run | bmodel (model_tool "
             "--info) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        cells = [r.case, r.mode, "pass" if r.ok else "FAIL", r.failed_step, r.message, f"{r.seconds:.1f}",
                 r.run, r.info]
        lines.append("| " + " | ".join(cell.replace("|", "/") for cell in cells) + " |")
    built = sum(r.ok for r in results)
    agreed = sum(r.run.startswith("cmodel = our executor on") for r in results)
    lines += ["", f"{built}/{len(results)} cases reach a bmodel; {agreed}/{len(results)} run on the cmodel "
              "equal to our executor."]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if built == agreed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
