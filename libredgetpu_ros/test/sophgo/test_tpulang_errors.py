"""Bad input is refused with a TpuLangError naming the op (and argument): wrong dtypes, shape mismatches,
missing weights, malformed MLIR given to ``tpulang run``; a bounded, seeded fuzz of the MLIR parser."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.cli.main import main
from libredgetpu_ros.sophgo.executor import execute
from libredgetpu_ros.sophgo.parser import load_mlir, parse_mlir

from libredgetpu_ros import sophgo as tpul

CASE = "f32_conv_bias_relu"
QCASE = "q_conv_int_zp_requant"
FUZZ_CASES = 400
FUZZ_SECONDS_PER_CASE = 1.0


@pytest.fixture
def graph():
    tpul.init("bm1684x")
    yield
    tpul.deinit()


def _case(fixtures_dir: Path, case: str) -> tuple[Path, dict, dict]:
    folder = fixtures_dir / "tpulang" / case
    module = load_mlir(folder / f"{case}_origin.mlir")
    return folder / f"{case}_origin.mlir", dict(np.load(folder / module.weight_file)), \
        dict(np.load(folder / f"{case}_in.npz"))


# -- builder ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("build, message", [
    (lambda: tpul.conv(tpul.Tensor([1, 3, 4, 4], name="x", dtype="int8"),
                       tpul.Tensor(name="w", ttype="coeff", data=np.zeros((2, 3, 1, 1), np.float32)),
                       out_name="c"),
     "conv 'c': input must be float32/float16"),
    (lambda: tpul.conv_int(tpul.Tensor([1, 3, 4, 4], name="x"),
                           tpul.Tensor(name="w", ttype="coeff", data=np.zeros((2, 3, 1, 1), np.int8),
                                       dtype="int8"),
                           out_name="c"),
     "conv_int 'c': input must be an integer tensor"),
    (lambda: tpul.conv(tpul.Tensor([1, 3, 4, 4], name="x"),
                       tpul.Tensor(name="w", ttype="coeff", data=np.zeros((2, 3, 1, 1), np.float32)),
                       tpul.Tensor(name="b", ttype="coeff", data=np.zeros(3, np.float32)), out_name="c"),
     r"conv 'c': bias has shape \[3\], expected \[2\]"),
    (lambda: tpul.Tensor(name="w", ttype="coeff", data=np.zeros(3, np.float64)),
     "Tensor 'w': data has dtype float64, the tensor is declared float32"),
    (lambda: tpul.Tensor([2, 2], name="w", ttype="coeff"),
     r"Tensor 'w': a coeff tensor needs data \(missing weights\)"),
    (lambda: tpul.Tensor([2, 2], name="x", dtype="int4"), "Tensor 'x': dtype 'int4' is not one of"),
    (lambda: tpul.add(tpul.Tensor([2, 2], name="a"), tpul.Tensor([2, 2], name="b", dtype="int8"),
                      out_name="s"),
     "add 's': tensor_i0 is float32 but tensor_i1 is int8"),
    (lambda: tpul.add(tpul.Tensor([2, 3], name="a"), tpul.Tensor([2, 2], name="b"), out_name="s"),
     r"add 's': shapes \[2, 3\] and \[2, 2\] do not broadcast"),
    (lambda: tpul.matmul_int(tpul.Tensor([2, 4], name="a", dtype="int8", scale=0.1, zero_point=1),
                             tpul.Tensor(name="w", ttype="coeff", data=np.zeros((4, 2), np.int8),
                                         dtype="int8"),
                             input_zp=3, out_name="m"),
     "matmul_int 'm' input_zp: tensor 'a' is already quantized"),
    (lambda: tpul.requant_int(tpul.Tensor([1, 4, 2, 2], name="a", dtype="int32"), [1, 2], [0, 0], 0, 2,
                              out_name="r"),
     "requant_int 'r': mul has 2 values, axis 1 of the input has 4"),
    (lambda: tpul.requant_int(tpul.Tensor([1, 4], name="a", dtype="int32"), 1, 0, 0, 7, out_name="r"),
     "requant_int 'r': requant_mode must be 0, 1 or 2"),
    (lambda: tpul.relu("x", out_name="r"), "relu 'r': input must be a Tensor, got str"),
    (lambda: tpul.maxpool2d(tpul.Tensor([1, 3, 4, 4], name="x"), [2, 2], round_mode="banker", out_name="p"),
     "maxpool2d 'p': round_mode 'banker'"),
])
def test_builder_errors_name_op_and_argument(graph, build, message: str) -> None:
    with pytest.raises(tpul.TpuLangError, match=message):
        build()


def test_duplicate_names_and_missing_init() -> None:
    tpul.init("bm1684x")
    x = tpul.Tensor([1, 4], name="x")
    tpul.relu(x, out_name="r")
    with pytest.raises(tpul.TpuLangError, match=r"top\.Relu 'r': out_name is already used"):
        tpul.relu(x, out_name="r")
    tpul.deinit()
    with pytest.raises(tpul.TpuLangError, match="no graph; call init"):
        tpul.relu(x, out_name="r2")
    with pytest.raises(tpul.TpuLangError, match="init: device 'tpu9'"):
        tpul.init("tpu9")


def test_names_are_escaped_like_llvm_and_must_be_distinct() -> None:
    tpul.init("bm1684x")
    x = tpul.Tensor([1, 4], name='in "q" \\ é\n')
    y = tpul.relu(x, out_name="r/1;x")
    module, _ = tpul.build("n", [x], [y], quantized=False)
    text = tpul.emit_mlir(module)
    assert '#loc1 = loc("in \\22q\\22 \\5C \\C3\\A9\\0A")' in text
    assert parse_mlir(text).inputs[0][0] == x.name
    z = tpul.relu(y, out_name=x.name)
    with pytest.raises(tpul.TpuLangError, match="is used by two tensors"):
        tpul.build("n", [x], [z], quantized=False)
    with pytest.raises(tpul.TpuLangError, match="must be a bare MLIR identifier"):
        tpul.build("my-net", [x], [y], quantized=False)
    tpul.deinit()


# -- executor -----------------------------------------------------------------------------------------
def test_executor_input_and_weight_errors_name_the_op(fixtures_dir: Path) -> None:
    path, weights, inputs = _case(fixtures_dir, CASE)
    module = load_mlir(path)
    with pytest.raises(tpul.TpuLangError, match=r"top\.Weight 'conv1_b': missing weight"):
        execute(module, {"conv1_w": weights["conv1_w"]}, inputs)
    with pytest.raises(tpul.TpuLangError, match=r"top\.Weight 'conv1_w': weight has dtype float64"):
        execute(module, {**weights, "conv1_w": weights["conv1_w"].astype(np.float64)}, inputs)
    with pytest.raises(tpul.TpuLangError, match=r"top.Weight 'conv1_w': weight has shape \[8, 3, 3, 2\]"):
        execute(module, {**weights, "conv1_w": weights["conv1_w"][..., :2]}, inputs)
    with pytest.raises(tpul.TpuLangError, match=r"top\.Input 'x': missing input"):
        execute(module, weights, {})
    with pytest.raises(tpul.TpuLangError, match=r"top.Input 'x': input has shape \[1, 3, 8, 7\]"):
        execute(module, weights, {"x": inputs["x"][..., :7]})
    with pytest.raises(tpul.TpuLangError, match=r"top\.Input 'x': input has dtype int8"):
        execute(module, weights, {"x": inputs["x"].astype(np.int8)})


@pytest.mark.parametrize("edit, message", [
    (("pads = [1, 1, 1, 1]", "pads = [1, 1, 1]"), "top.Conv 'conv1': pads must be a list of 4"),
    (('"top.Relu"', '"top.Gelu"'), "top.Gelu 'relu1': op kind top.Gelu is not supported"),
    (("group = 1 : i64", "group = 2 : i64"), "top.Conv 'conv1': input has 3 channels"),
    (("tensor<8xf32>) -> tensor<*xf32> loc(#loc4)", "tensor<8xsi32>) -> tensor<*xf32> loc(#loc4)"),
     r"\(top.Conv %4\): operand %3 is declared"),
    (("%5 = \"top.Relu\"(%4)", "%5 = \"top.Relu\"(%9)"), r"\(top.Relu %5\): operand %9 is used before"),
    (('#loc5 = loc("relu1")', '#loc5 = loc("conv1")'), "top.Relu %5: name 'conv1' is used twice"),
])
def test_malformed_mlir_to_run_names_the_op(fixtures_dir: Path, tmp_path: Path, capsys, edit,
                                            message: str) -> None:
    path, weights, inputs = _case(fixtures_dir, CASE)
    text = path.read_text()
    assert edit[0] in text
    bad = tmp_path / "bad_origin.mlir"
    bad.write_text(text.replace(edit[0], edit[1], 1))
    np.savez(tmp_path / "w.npz", **weights)
    np.savez(tmp_path / "in.npz", **inputs)
    code = main(["tpulang", "run", str(bad), str(tmp_path / "w.npz"), str(tmp_path / "in.npz"),
                 "--out", str(tmp_path / "out.npz")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ") and re.search(message, err), err
    assert not (tmp_path / "out.npz").exists()


def test_run_refuses_unreadable_npz(fixtures_dir: Path, tmp_path: Path, capsys) -> None:
    path, _, _ = _case(fixtures_dir, CASE)
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 not really")
    code = main(["tpulang", "run", str(path), str(tmp_path / "junk.npz"), str(tmp_path / "junk.npz"),
                 "--out", str(tmp_path / "o.npz")])
    assert code == 2 and "not a readable .npz" in capsys.readouterr().err


def test_npz_headers_are_checked_before_allocating(tmp_path: Path) -> None:
    import zipfile

    from libredgetpu_ros.sophgo.npz_reader import read_npz

    good = tmp_path / "good.npz"
    np.savez(good, w=np.arange(6, dtype=np.int8).reshape(2, 3))
    assert read_npz(good)["w"].shape == (2, 3)
    # Same member, header rewritten to claim 10**12 elements: refused before np.load allocates.
    with zipfile.ZipFile(good) as archive:
        raw = archive.read("w.npy")
    bad = tmp_path / "bad.npz"
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr("w.npy", raw.replace(b"(2, 3)", b"(1000000, 1000000)"))
    with pytest.raises(tpul.TpuLangError, match=r"member 'w.npy': header declares \[1000000, 1000000\]"):
        read_npz(bad, "weights")
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr("w.npy", b"\x93NUMPY garbage")
    with pytest.raises(tpul.TpuLangError, match=r"not a valid \.npy header"):
        read_npz(bad, "weights")
    objects = tmp_path / "objects.npz"
    np.savez(objects, o=np.array([{"a": 1}], dtype=object))
    with pytest.raises(tpul.TpuLangError, match="pickles"):
        read_npz(objects)


# -- parser fuzz -----------------------------------------------------------------------------------------
def _mutate(text: str, rng: np.random.Generator) -> str:
    data = list(text)
    for _ in range(int(rng.integers(1, 4))):
        kind = int(rng.integers(0, 5))
        i = int(rng.integers(0, len(data)))
        if kind == 0:
            data[i] = chr(int(rng.choice([32, 34, 37, 40, 41, 44, 45, 48, 57, 60, 62, 91, 93, 120, 123,
                                          125])))
        elif kind == 1:
            del data[i:i + int(rng.integers(1, 12))]
        elif kind == 2:
            j = int(rng.integers(0, len(data)))
            data[i:i] = data[j:j + int(rng.integers(1, 40))]
        elif kind == 3:
            data[i:i] = list(str(int(rng.integers(-10**12, 10**12))))
        else:
            data[i:i] = list("\n")
    return "".join(data)


@pytest.mark.parametrize("case", [CASE, QCASE])
def test_fuzz_parser_and_executor_only_raise_tpulang_errors(fixtures_dir: Path, case: str) -> None:
    path, weights, inputs = _case(fixtures_dir, case)
    text = path.read_text()
    rng = np.random.default_rng(14)
    parsed = 0
    for n in range(FUZZ_CASES):
        mutated = _mutate(text, rng)
        start = time.perf_counter()
        try:
            module = parse_mlir(mutated, f"fuzz{n}")
            parsed += 1
            execute(module, weights, inputs)
        except tpul.TpuLangError:
            pass
        assert time.perf_counter() - start < FUZZ_SECONDS_PER_CASE, f"mutation {n} took too long"
    assert 0 < parsed < FUZZ_CASES  # some mutations still parse (numbers, names), most do not


def _mutate_json(value, rng: np.random.Generator, depth: int = 0):
    """Replace, drop or retype one random part of a JSON value."""
    junk = [None, "x", -1, 0, 10**30, 1.5, [], {}, [1, "a"], {"tensor": "nope"}, True]
    if depth > 6 or rng.random() < 0.15:
        return junk[int(rng.integers(0, len(junk)))]
    if isinstance(value, dict) and value:
        keys = list(value)
        key = keys[int(rng.integers(0, len(keys)))]
        out = dict(value)
        if rng.random() < 0.2:
            del out[key]
        else:
            out[key] = _mutate_json(value[key], rng, depth + 1)
        return out
    if isinstance(value, list) and value:
        out = list(value)
        i = int(rng.integers(0, len(out)))
        out[i] = _mutate_json(out[i], rng, depth + 1)
        return out
    return junk[int(rng.integers(0, len(junk)))]


@pytest.mark.parametrize("case", ["f32_mlp_softmax", QCASE])
def test_fuzz_case_json_replay_only_raises_tpulang_errors(fixtures_dir: Path, tmp_path: Path,
                                                          case: str) -> None:
    import json
    import shutil

    from libredgetpu_ros.sophgo.replay import replay_case

    folder = fixtures_dir / "tpulang" / case
    spec = json.loads((folder / f"{case}.json").read_text())
    shutil.copy(folder / spec["files"]["weights"], tmp_path / spec["files"]["weights"])
    rng = np.random.default_rng(1414)
    built = 0
    for n in range(300):
        path = tmp_path / f"{case}.json"
        path.write_text(json.dumps(_mutate_json(spec, rng)))
        start = time.perf_counter()
        try:
            replay_case(path)
            built += 1
        except tpul.TpuLangError:
            pass
        assert time.perf_counter() - start < FUZZ_SECONDS_PER_CASE, f"mutation {n} took too long"
    assert built < 300
