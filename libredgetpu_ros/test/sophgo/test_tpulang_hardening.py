"""Issue 21 items 4, 5, 7 for the TpuLang tools: a memory budget checked from the MLIR before anything is
allocated, npz arrays read only when the module uses them and only as large as the bytes present allow,
outputs that a full disk or a kill -9 never leave cut, and user text bounded in error lines.

Faults are real where the OS can make them: RLIMIT_FSIZE turns a write part-way into EFBIG (a full disk
as far as the writer can tell), SIGKILL interrupts a real CLI process, RLIMIT_AS caps a process's memory."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.cli.main import main
from libredgetpu_ros.sophgo.emitter import save_module
from libredgetpu_ros.sophgo.executor import execute
from libredgetpu_ros.sophgo.memory_plan import SHAPE_RULES, plan_memory
from libredgetpu_ros.sophgo.npz_reader import read_npz
from libredgetpu_ros.sophgo.op_registry import HANDLERS
from libredgetpu_ros.sophgo.parser import load_mlir

from libredgetpu_ros import sophgo as tpul

from .._helpers import CLI, one_error_line, start_limited

pytestmark = pytest.mark.timeout(120)

CASES = ("f32_add_concat_reshape_permute", "f32_conv_bias_relu", "f32_conv_s2_asym_maxpool",
         "f32_dwconv_dil2_avgpool", "f32_mlp_softmax", "q_conv_int_zp_requant", "q_conv_quant_perchannel",
         "q_matmul_int_requant")  # every conformance case: all the executor's op kinds


def _cli(args: list[str], *, fsize: int | None = None, memory: int | None = None,
         **popen: object) -> subprocess.Popen:
    """`libredgetpu-ros ARGS` in a child process, optionally with a file-size or address-space limit."""
    return start_limited([*CLI, *args], memory=memory, fsize=fsize, **popen)


def _run_cli(args: list[str], **limits: int) -> tuple[int, str]:
    proc = _cli(args, **limits)
    _, err = proc.communicate(timeout=100)
    return proc.returncode, err.decode(errors="replace")


def _relu_chain(folder: Path, shape: list[int], pads: int = 0, convs: int = 0) -> tuple[Path, Path]:
    """An f32 module: input x of ``shape``, then ``convs`` 1x1 convs padded by ``pads``, then a relu."""
    tpul.init("bm1684x")
    try:
        x = tpul.Tensor(shape, name="x")
        y = x
        for i in range(convs):
            w = tpul.Tensor([shape[1], shape[1], 1, 1], name=f"w{i}", ttype="coeff",
                            data=np.ones((shape[1], shape[1], 1, 1), np.float32))
            y = tpul.conv(y, w, pad=[1, 1, 1, 1], out_name=f"conv{i}")
        y = tpul.relu(y, out_name="y")
        module, weights = tpul.build("chain", [x], [y], quantized=False)
    finally:
        tpul.deinit()
    mlir, npz = save_module(module, weights, folder)
    if pads:
        padded = f"pads = [{pads}, {pads}, {pads}, {pads}]"
        mlir.write_text(mlir.read_text().replace("pads = [1, 1, 1, 1]", padded))
    return mlir, npz


# -- item 4: memory budget ----------------------------------------------------------------------------------
def test_plan_covers_every_executor_op_and_matches_the_shapes_it_produces(fixtures_dir: Path) -> None:
    assert set(SHAPE_RULES) == set(HANDLERS)
    for case in CASES:
        folder = fixtures_dir / "tpulang" / case
        module = load_mlir(folder / f"{case}_origin.mlir")
        plan = plan_memory(module)
        values = execute(module, dict(np.load(folder / module.weight_file)),
                         dict(np.load(folder / f"{case}_in.npz")), keep_all=True)
        assert {k: v.shape for k, v in values.items()} == plan.shapes, case
        assert plan.value_bytes == {k: v.nbytes for k, v in values.items()}, case
        assert 0 < plan.peak_bytes < 64 << 20
        assert plan_memory(module, keep_all=True).peak_bytes >= plan.peak_bytes  # values are dropped


def test_values_are_dropped_after_their_last_reader(fixture_path) -> None:
    """The MobileNet v1 0.25 export (31 ops): the executor frees each activation after its last reader, so
    a run traces ~40% less than keeping every value, and the plan bounds both runs."""
    from libredgetpu_ros.sophgo.export_tflite import export_classifier

    module, weights = export_classifier(fixture_path("classify/mobilenet_v1_0.25_128_quant.tflite"), name="m")
    inputs = {name: np.full(t.shape, 128, t.np_dtype) for name, t in module.inputs}
    given = sum(a.nbytes for a in (*weights.values(), *inputs.values()))
    traced = {}
    for keep_all in (True, False):
        tracemalloc.start()
        try:
            outputs = execute(module, weights, inputs, keep_all=keep_all)
            traced[keep_all] = given + tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert traced[keep_all] <= plan_memory(module, keep_all=keep_all).peak_bytes
        assert (len(outputs) > len(module.outputs)) == keep_all
    assert traced[False] < 0.75 * traced[True], traced


def _int_conv_graph() -> tuple:
    x = tpul.Tensor([1, 16, 128, 128], name="x", dtype="int8")
    w = tpul.Tensor([32, 16, 3, 3], name="w", ttype="coeff", dtype="int8",
                    data=np.ones((32, 16, 3, 3), np.int8))
    y = tpul.conv_int(x, w, pad=[1, 1, 1, 1], input_zp=3, weight_zp=1, out_dtype="int32", out_name="c")
    y = tpul.requant_int(y, 12345, 20, 0, 2, out_dtype="int8", out_name="r")
    y = tpul.avgpool2d(y, kernel=[3, 3], stride=[1, 1], pad=[1, 1, 1, 1], out_name="a")
    return tpul.build("n", [x], [y], quantized=True), {"x": np.ones((1, 16, 128, 128), np.int8)}


def _float_graph() -> tuple:
    x = tpul.Tensor([1, 16, 128, 128], name="x")
    w = tpul.Tensor([32, 16, 3, 3], name="w", ttype="coeff", data=np.ones((32, 16, 3, 3), np.float32))
    dw = tpul.Tensor([32, 1, 3, 3], name="dw", ttype="coeff", data=np.ones((32, 1, 3, 3), np.float32))
    y = tpul.conv(x, w, pad=[1, 1, 1, 1], out_name="c")
    y = tpul.conv(y, dw, pad=[1, 1, 1, 1], group=32, out_name="d")
    y = tpul.maxpool2d(y, kernel=[3, 3], stride=[1, 1], pad=[1, 1, 1, 1], out_name="p")
    y = tpul.softmax(y, axis=1, out_name="s")
    m = tpul.Tensor([128, 64], name="m", ttype="coeff", data=np.ones((128, 64), np.float32))
    y = tpul.matmul(y, m, out_name="mm")
    return tpul.build("n", [x], [y], quantized=False), {"x": np.ones((1, 16, 128, 128), np.float32)}


@pytest.mark.parametrize("graph", [_int_conv_graph, _float_graph])
def test_plan_is_an_upper_bound_of_what_the_run_allocates(graph) -> None:
    """NumPy reports its buffers to tracemalloc: the run's traced peak (plus the inputs and weights it was
    given) stays under the plan's estimate on graphs large enough for the arrays to dominate."""
    tpul.init("bm1684x")
    try:
        (module, weights), inputs = graph()
    finally:
        tpul.deinit()
    plan = plan_memory(module)
    given = sum(a.nbytes for a in (*weights.values(), *inputs.values()))
    tracemalloc.start()
    try:
        execute(module, weights, inputs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert given + peak <= plan.peak_bytes, (given + peak, plan.peak_bytes, plan.peak_op)


def test_memory_bomb_mlir_is_refused_before_allocating(tmp_path: Path) -> None:
    """A 1x1 input and four 1x1 convs padded by 8191 (the issue's 1 KB file): a typed error naming the first
    conv and the budget, under a 1.5 GiB address-space cap. Before: an untyped MemoryError traceback."""
    mlir, weights = _relu_chain(tmp_path, [1, 1, 1, 1], pads=8191, convs=4)
    assert mlir.stat().st_size < 4096
    np.savez(tmp_path / "in.npz", x=np.ones((1, 1, 1, 1), np.float32))
    with pytest.raises(tpul.TpuLangError, match=r"top.Conv 'conv0': running this module needs about \d+ MiB"):
        plan_memory(load_mlir(mlir))
    code, err = _run_cli(["tpulang", "run", str(mlir), str(weights), str(tmp_path / "in.npz"), "--out",
                          str(tmp_path / "out.npz")], memory=1536 << 20)
    line = one_error_line(code, err)
    assert "MiB budget" in line and "nothing was allocated" in line
    assert not (tmp_path / "out.npz").exists()


def test_budget_option_refuses_a_graph_that_fits_the_default(tmp_path: Path, capsys) -> None:
    mlir, weights = _relu_chain(tmp_path, [1, 4, 256, 256])  # 1 MiB input: a few MiB peak
    np.savez(tmp_path / "in.npz", x=np.ones((1, 4, 256, 256), np.float32))
    args = ["tpulang", "run", str(mlir), str(weights), str(tmp_path / "in.npz"), "--out",
            str(tmp_path / "o.npz")]
    assert main(args) == 0
    assert main([*args, "--max-memory-mb", "2"]) == 2
    assert "more than the 2 MiB budget" in capsys.readouterr().err
    assert main([*args, "--max-memory-mb", "0"]) == 2


def test_cli_default_budget_is_the_executors() -> None:
    # tpulang_cmd keeps its own copy (importing memory_plan would weigh on `--help`): they must not drift.
    from libredgetpu_ros.cli.tpulang_cmd import DEFAULT_BUDGET_MB
    from libredgetpu_ros.sophgo.memory_plan import DEFAULT_BUDGET

    assert DEFAULT_BUDGET_MB << 20 == DEFAULT_BUDGET


def _stream_npz(path: Path, arrays: dict[str, tuple[tuple[int, ...], np.dtype, int]]) -> None:
    """An npz whose members are written in 1 MiB blocks of one byte value (deflated), so a huge array never
    exists in this process: name -> (shape, dtype, fill byte)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, (shape, dtype, fill) in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array_header_1_0(member, {"descr": np.lib.format.dtype_to_descr(dtype),
                                                              "fortran_order": False, "shape": shape})
                left = int(np.prod(shape)) * dtype.itemsize
                block = bytes([fill]) * (1 << 20)
                while left:
                    member.write(block[:min(left, len(block))])
                    left -= min(left, len(block))


def test_unused_npz_array_is_never_loaded(tmp_path: Path) -> None:
    """The issue's 1.2 MB npz holding a 1.2 GB unused array was allocated whole; here 256 MiB of zeros
    (~250 KB deflated) beside the module's input: peak traced allocation stays under 16 MiB."""
    npz = tmp_path / "in.npz"
    _stream_npz(npz, {"x": ((1, 4, 8, 8), np.dtype(np.float32), 0),
                      "junk": ((256 << 20,), np.dtype(np.uint8), 0)})
    assert npz.stat().st_size < 2 << 20
    tracemalloc.start()
    try:
        arrays = read_npz(npz, "inputs", names=["x"], max_bytes=4 * 4 * 8 * 8)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert list(arrays) == ["x"] and arrays["x"].shape == (1, 4, 8, 8)
    assert peak < 16 << 20, peak


def test_used_member_larger_than_the_module_declares_is_refused_unread(tmp_path: Path) -> None:
    npz = tmp_path / "in.npz"
    _stream_npz(npz, {"x": ((64 << 20,), np.dtype(np.uint8), 1)})
    tracemalloc.start()
    try:
        with pytest.raises(tpul.TpuLangError, match="more than 1024 bytes of arrays in the members"):
            read_npz(npz, "inputs", names=["x"], max_bytes=1024)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak


def test_declared_size_must_fit_the_bytes_present(tmp_path: Path) -> None:
    """A stored member whose zip headers claim 2 GiB (and an .npy header to match) in a 200-byte file."""
    good = tmp_path / "good.npz"
    with zipfile.ZipFile(good, "w", compression=zipfile.ZIP_STORED) as archive, \
            archive.open("w.npy", "w") as member:
        np.lib.format.write_array_header_1_0(member, {"descr": "|u1", "fortran_order": False,
                                                      "shape": ((1 << 31) - 1 - 128,)})
        member.write(b"\x00" * 8)
    data = bytearray(good.read_bytes())
    huge = (1 << 31) - 1
    local = data.index(b"PK\x03\x04")
    central = data.index(b"PK\x01\x02")
    data[local + 22:local + 26] = huge.to_bytes(4, "little")      # local header: uncompressed size
    data[central + 24:central + 28] = huge.to_bytes(4, "little")  # central directory: uncompressed size
    bad = tmp_path / "bad.npz"
    bad.write_bytes(bytes(data))
    with pytest.raises(tpul.TpuLangError, match="an uncompressed member declaring 2147483647 bytes in"):
        read_npz(bad, "weights")


def test_member_flagged_encrypted_is_typed(tmp_path: Path) -> None:
    """Found by the long fuzz run: the zip 'encrypted' flag made zipfile raise RuntimeError (untyped)."""
    path = tmp_path / "w.npz"
    np.savez(path, w=np.arange(4, dtype=np.int8))
    data = bytearray(path.read_bytes())
    for signature, flag_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        pos = data.index(signature) + flag_at
        data[pos] |= 1
    path.write_bytes(bytes(data))
    with pytest.raises(tpul.TpuLangError, match="an encrypted member"):
        read_npz(path, "weights")


@pytest.mark.parametrize("literal", ["-1.000000e+400", "0x7FF0000000000000", "0x7FF8000000000000"])
def test_non_finite_float_literals_are_refused(fixtures_dir: Path, literal: str) -> None:
    """Found by the tpulang_mlir_numbers fuzz target: an overflowing literal parsed to -inf, which the
    module could then not be printed with (ValueError from the emitter)."""
    from libredgetpu_ros.sophgo.parser import parse_mlir

    text = (fixtures_dir / "tpulang" / "f32_conv_bias_relu" / "f32_conv_bias_relu_origin.mlir").read_text()
    assert "relu_limit = -1.000000e+00 : f64" in text
    with pytest.raises(tpul.TpuLangError, match="is not finite"):
        parse_mlir(text.replace("relu_limit = -1.000000e+00 : f64", f"relu_limit = {literal} : f64"))


def test_relu_limit_beyond_the_dtype_range_clips_nothing(fixtures_dir: Path) -> None:
    """Found by the tpulang_mlir_numbers long run (a RuntimeWarning): relu_limit 300 on raw int8 values was
    cast to int8 (44) and clipped every value above 44."""
    from libredgetpu_ros.sophgo.parser import parse_mlir

    case = "q_conv_int_zp_requant"
    folder = fixtures_dir / "tpulang" / case
    text = (folder / f"{case}_origin.mlir").read_text()
    relu = next(line for line in text.splitlines() if '"top.Relu"' in line)
    assert "relu_limit = -1.000000e+00" in relu and "i8" in relu
    module = load_mlir(folder / f"{case}_origin.mlir")
    weights, inputs = dict(np.load(folder / module.weight_file)), dict(np.load(folder / f"{case}_in.npz"))
    plain = execute(module, weights, inputs)
    limited_text = text.replace(relu, relu.replace("relu_limit = -1.000000e+00", "relu_limit = 3.000000e+02"))
    limited = execute(parse_mlir(limited_text), weights, inputs)
    assert plain.keys() == limited.keys()
    for key, value in plain.items():
        np.testing.assert_array_equal(limited[key], value)
    assert max(int(v.max()) for v in plain.values()) > 44  # the old cast would have clipped these


# -- item 5: outputs are never cut --------------------------------------------------------------------------
def _sizes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_export_and_replay_failing_part_way_keep_the_previous_pair(tmp_path: Path,
                                                                   fixtures_dir: Path) -> None:
    """The second write of the same outputs hits the file-size limit part-way (EFBIG, what a full disk
    looks like to the writer). Before: the npz was cut to the limit, with a traceback."""
    out = tmp_path / "out"
    export = ["export-tpulang", "dense", "--template", "256", "--out", str(out)]
    assert _run_cli(export)[0] == 0
    before = _sizes(out)
    assert max(len(v) for v in before.values()) > 64 << 10
    code, err = _run_cli(export, fsize=16 << 10)
    assert "cannot write" in one_error_line(code, err) and "File too large" in err
    assert _sizes(out) == before
    case = fixtures_dir / "tpulang" / "f32_mlp_softmax" / "f32_mlp_softmax.json"
    replay = ["tpulang", "replay", str(case), "--out", str(out)]
    assert _run_cli(replay)[0] == 0
    before = _sizes(out)
    code, err = _run_cli(replay, fsize=1 << 10)
    assert "cannot write" in one_error_line(code, err)
    assert _sizes(out) == before


def _big_run(tmp_path: Path) -> list[str]:
    """`tpulang run` of a relu over a 16 MiB input: a 16 MiB output npz."""
    mlir, weights = _relu_chain(tmp_path, [1, 4, 1024, 1024])
    np.savez(tmp_path / "in.npz", x=np.full((1, 4, 1024, 1024), -1.0, np.float32))
    return ["tpulang", "run", str(mlir), str(weights), str(tmp_path / "in.npz"), "--out",
            str(tmp_path / "out" / "o.npz")]


def test_run_out_failing_part_way_keeps_the_old_file(tmp_path: Path) -> None:
    args = _big_run(tmp_path)
    assert _run_cli(args)[0] == 0
    out = tmp_path / "out" / "o.npz"
    before = out.read_bytes()
    code, err = _run_cli(args, fsize=8 << 20)  # the 16 MiB input is read; the output fails at 8 MiB
    assert "cannot write" in one_error_line(code, err)
    assert out.read_bytes() == before
    assert [p.name for p in out.parent.iterdir()] == ["o.npz"]  # no temporary left behind


def test_kill_9_mid_write_never_leaves_a_partial_output(tmp_path: Path) -> None:
    """Each of 5 runs is SIGKILLed the moment anything in the output folder changes (the output or its
    temporary appearing or growing): the final name then holds the previous complete output, never a cut
    one. Before: np.savez wrote on the final name, which the first try caught half-written."""
    args = _big_run(tmp_path)
    assert _run_cli(args)[0] == 0
    folder = tmp_path / "out"
    expected = np.load(folder / "o.npz")["y"].copy()
    for _ in range(5):
        baseline = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
        proc = _cli(args)
        while proc.poll() is None:
            now = {p.name: p.stat().st_mtime_ns for p in folder.iterdir() if p.exists()}
            if now != baseline:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.0005)
        proc.wait(timeout=60)
        proc.stdout.close()
        proc.stderr.close()
        with np.load(folder / "o.npz") as data:
            np.testing.assert_array_equal(data["y"], expected)
        for stale in folder.glob(".o.npz.*.tmp"):  # what a kill leaves: a hidden temporary
            stale.unlink()


def test_output_folder_that_cannot_be_made_isone_error_line(tmp_path: Path, fixtures_dir: Path,
                                                             capsys) -> None:
    """--out below a regular file. Before: a FileExistsError / NotADirectoryError traceback."""
    blocker = tmp_path / "file"
    blocker.write_bytes(b"x")
    case = fixtures_dir / "tpulang" / "f32_mlp_softmax" / "f32_mlp_softmax.json"
    mlir, weights = _relu_chain(tmp_path, [1, 2, 2, 2])
    np.savez(tmp_path / "in.npz", x=np.ones((1, 2, 2, 2), np.float32))
    for argv in (["tpulang", "replay", str(case), "--out", str(blocker / "out")],
                 ["export-tpulang", "dense", "--template", "256", "--out", str(blocker / "out")],
                 ["tpulang", "run", str(mlir), str(weights), str(tmp_path / "in.npz"), "--out",
                  str(blocker / "out" / "o.npz")]):
        line = one_error_line(main(argv), capsys.readouterr().err)
        assert "cannot make the folder" in line, line


# -- item 7: user text in error lines is bounded ----------------------------------------------------------
def test_replay_with_a_10k_character_case_name(tmp_path: Path, fixtures_dir: Path) -> None:
    """Before: OSError 'File name too long' traceback echoing the whole name."""
    folder = fixtures_dir / "tpulang" / "f32_mlp_softmax"
    spec = json.loads((folder / "f32_mlp_softmax.json").read_text())
    spec["case"] = "a" * 10_000
    spec.setdefault("files", {})["weights"] = str(folder / spec.get("files", {}).get("weights", ""))
    case = tmp_path / "big.json"
    case.write_text(json.dumps(spec))
    line = one_error_line(*_run_cli(["tpulang", "replay", str(case), "--out", str(tmp_path / "out")]))
    assert "10000 characters" in line and "longer than the" in line


def test_deeply_nested_case_json_isone_error_line(tmp_path: Path) -> None:
    case = tmp_path / "deep.json"
    case.write_text("[" * 100_000 + "]" * 100_000)
    line = one_error_line(*_run_cli(["tpulang", "replay", str(case), "--out", str(tmp_path / "out")]))
    assert "nested" in line


def test_a_huge_op_name_is_not_echoed_whole(tmp_path: Path, fixtures_dir: Path, capsys) -> None:
    """An op named by a 2 MB `loc` string (the issue's was 60 MB) that the weights lack: the error names it
    cut short. Before: the whole name in the error line."""
    case = "f32_mlp_softmax"
    folder = fixtures_dir / "tpulang" / case
    text = (folder / f"{case}_origin.mlir").read_text()
    module = load_mlir(folder / f"{case}_origin.mlir")
    weight = module.weights()[0].name
    assert f'loc("{weight}")' in text
    huge = "w" * (2 << 20)
    (tmp_path / "m_origin.mlir").write_text(text.replace(f'loc("{weight}")', f'loc("{huge}")'))
    np.savez(tmp_path / "in.npz", **dict(np.load(folder / f"{case}_in.npz")))
    code = main(["tpulang", "run", str(tmp_path / "m_origin.mlir"), str(folder / module.weight_file),
                 str(tmp_path / "in.npz"), "--out", str(tmp_path / "o.npz")])
    line = one_error_line(code, capsys.readouterr().err)
    assert "missing weight" in line and "www" in line
