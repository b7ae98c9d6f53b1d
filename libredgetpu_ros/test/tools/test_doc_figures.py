"""Figures the docs quote from bench/results/ are the result files' figures, verbatim.

Each entry names a doc, the result file it quotes and pairs of (text in the doc, text in the result file)
that must both be present, whitespace collapsed (docs wrap lines). Re-running a bench changes its result
file; this test then fails until the doc quotes the new run, which is the point: a doc figure never drifts
from the file a reader can regenerate. Figures that are one-off measurements (no bench repeats them) are
not listed: their docs say what they were, when and on what.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# (doc, result file under bench/results/, [(doc text, result text), ...])
QUOTES: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("docs/reliability.md", "fuzz_budget.md", [
        ("load average 4.1 to 4.3", "load average 4.1 at the start, 4.3 at the end"),
        ("tflite 2.64 s (2.60–2.71)",
         "| tflite | 2,000 | 956 | 1,044 | 0 | 0 | 0 | yes | 2.64 (2.60–2.71) |"),
        ("flexbuffers 0.18 s (0.18–0.19)",
         "| flexbuffers | 2,000 | 1,019 | 981 | 0 | 0 | 0 | yes | 0.18 (0.18–0.19) |"),
        ("darwinn 1.97 s (1.95–1.98)",
         "| darwinn | 2,000 | 1,217 | 783 | 0 | 0 | 0 | yes | 1.97 (1.95–1.98) |"),
        ("9.2×, 3.6× and 3.0×", "| 9.2× (9.2–9.7×) |"),
        ("9.2×, 3.6× and 3.0×", "| 3.6× (3.5–3.8×) |"),
        ("9.2×, 3.6× and 3.0×", "| 3.0× (3.0–3.1×) |"),
        ("tflite 956 accepted / 1,044 refused, flexbuffers 1,019 / 981, darwinn 1,217 / 783",
         "| 1,217 | 783 |"),
        ("Worker RSS peak 49, 43 and 54 MB (43 MB at the worker's start", "| 43 / 49 MB |"),
        ("Worker RSS peak 49, 43 and 54 MB", "| 43 / 54 MB |"),
    ]),
    ("docs/install.md", "first_call.md", [
        ("4.05–4.18 s of CPU for a MatMul engine", "| empty cache | 4.09–5.87 s | 4.05–4.18 s |"),
        ("5.68–17.06 s for the robotics modules", "| empty cache | 5.73–12.29 s | 5.68–6.13 s |"),
        ("5.68–17.06 s for the robotics modules", "| empty cache | 21.62–32.40 s | 16.07–17.06 s |"),
        ("4.10–4.30 s for the DeepLab pipeline", "| empty cache | 5.58–8.60 s | 4.10–4.30 s |"),
        ("later ones load them (0.65–0.88 s)", "| warm cache | 0.68–0.96 s | 0.65–0.68 s |"),
        ("later ones load them (0.65–0.88 s)", "| warm cache | 1.42–2.11 s | 0.83–0.88 s |"),
    ]),
    ("docs/control_node.md", "control_node.md", [
        ("p50 0.691 ms at 1 kHz", "| 1000 Hz | 1 | 3000 | 2739 (261) | 0.691 ms |"),
        ("W·x itself is 0.026 ms", "| 0.026 ms | 26.9× |"),
        ("1.35 ms for N = 256", "| 256 | tuned | 1.35 ms |"),
        ("7.18 ms for N = 1024", "| 1024 | tuned | 7.18 ms |"),
        ("(1.15 ms and 12.58 ms with it off)", "| 256 | glibc default | 1.15 ms |"),
        ("(1.15 ms and 12.58 ms with it off)", "| 1024 | glibc default | 12.58 ms |"),
        ("validate/quantize/blob/swap is 0.272 ms and 2.530 ms", "| 0.005 | 0.272 |"),
        ("validate/quantize/blob/swap is 0.272 ms and 2.530 ms", "| 0.018 | 2.530 |"),
        ("the p50 is 1.067–1.203 ms", "| 250 Hz | 1 | 750 | 750 (0) | 1.203 ms |"),
        ("the p50 is 1.067–1.203 ms", "| 250 Hz | 1000 | 750 | 750 (0) | 1.067 ms |"),
    ]),
    ("docs/robotics.md", "reservoir_precision.md", [
        ("load average 6.8 to 6.1", "load average 6.8 at the start, 6.1 at the end"),
        *[(row, row) for row in (
            "| Mackey-Glass, N=256 | 0.00425 | 6.21× | 2.21× |",
            "| Lorenz-x, N=256 | 0.00103 | 7.99× | 2.61× |",
            "| Mackey-Glass, N=1024 | 0.00156 | 11.37× | | 2.15× | 1.69× |",
            "| Lorenz-x, N=1024 | 0.00054 | 11.92× | | 1.95× | 1.66× |",
            "| step µs, N=256 (CPU twin) | | 18 (17–18) | 112 (109–146) | 161 (155–250) | 206 (201–308) |",
            "| step µs, N=1024 (CPU twin) | | 94 (91–101) | | 1323 (1241–1476) | 1847 (1762–1928) | "
            "2458 (2355–2547) |")],
        ("3.91× smaller than one pass's (0.001405 vs 0.005500",
         "9 passes 0.001405, one pass 0.005500 (3.91× larger)"),
    ]),
    ("docs/perception_node.md", "perception_node_image_group.md", [
        ("load average 5.2:", "load average 5.2)"),
        ("(`take`) 0.69 → 0.71 ms p50", "- classify `93bceaa` 30.0 Hz: dds_in 0.46 / 5.24, take 0.69 /"),
        ("(`take`) 0.69 → 0.71 ms p50", "- classify current 30.0 Hz: dds_in 0.45 / 9.47, take 0.71 /"),
        ("overhead 2.6 → 2.7 ms p50", "| 4.4 / 30.4 | 2.6 / 24.0 |"),
        ("overhead 2.6 → 2.7 ms p50", "| 4.5 / 34.9 | 2.7 / 25.7 |"),
    ]),
    ("docs/perception_node.md", "perception_node.md", [
        ("against 0.88 ms when the subscription shared", "take 0.88 -> 0.80"),
        ("hand-off 0.26 -> 0.02 ms p50 per frame", "| hand-off 0.26 -> 0.02 |"),
    ]),
    ("docs/sophgo.md", "sophgo.md", [
        ("MobileNet v1 0.25 10.1 ms per image, 2.0x the NumPy matmul floor",
         "10.1 ms per image, 2.0x the BLAS floor"),
    ]),
    ("docs/reliability.md", "fuzz_budget_images.md", [
        ("load average 5.5 to 6.6", "load average 5.5 at the start, 6.6 at the end"),
        ("`image_file` **100,000 cases, 21,395 decoded, 78,605 refused as `BadImage`, 0 untyped, 0 hangs, "
         "0 crashes**, worker CPU 9.30 s (4.0× the harness alone on the same seeds), 19.80 s wall, slowest "
         "case 62 ms, worker peak RSS 61 MB",
         "| image_file | 100,000 | 21,395 | 78,605 | 0 | 0 | 0 | yes | 9.30 (9.30–9.30) | "
         "0.093 (0.093–0.093) | 0.023 (0.023–0.023) | 4.0× (4.0–4.0×) | 19.80 (19.80–19.80) | 62 ms | "
         "40 / 61 MB |"),
        ("**100,000 cases, 19,753 decoded, 80,247 refused as `BadImage`, 0 untyped, 0 hangs, 0 crashes**, "
         "worker CPU 11.85 s (5.2×), 25.88 s wall, slowest case 99 ms, worker peak RSS 92 MB",
         "| compressed_frame | 100,000 | 19,753 | 80,247 | 0 | 0 | 0 | yes | 11.85 (11.85–11.85) | "
         "0.118 (0.118–0.118) | 0.023 (0.023–0.023) | 5.2× (5.2–5.2×) | 25.88 (25.88–25.88) | 99 ms | "
         "40 / 92 MB |"),
    ]),
    ("docs/reliability.md", "fuzz_budget_text.md", [
        ("load average 4.7 to 6.6", "load average 4.7 at the start, 6.6 at the end"),
        ("worker CPU 3.20, 3.76, 1.60 and 0.33 s",
         "| iospec | 4,000 | 137 | 3,863 | 0 | 0 | 0 | yes | 3.20 ("),
        ("worker CPU 3.20, 3.76, 1.60 and 0.33 s",
         "| iospec_tokens | 2,000 | 110 | 1,890 | 0 | 0 | 0 | yes | 3.76 ("),
        ("worker CPU 3.20, 3.76, 1.60 and 0.33 s",
         "| yaml | 2,000 | 402 | 1,598 | 0 | 0 | 0 | yes | 1.60 ("),
        ("worker CPU 3.20, 3.76, 1.60 and 0.33 s",
         "| json | 2,000 | 72 | 1,928 | 0 | 0 | 0 | yes | 0.33 ("),
        ("35.4×, 86.7×, 34.8× and 6.8× the harness alone", "| 35.4× ("),
        ("35.4×, 86.7×, 34.8× and 6.8× the harness alone", "| 86.7× ("),
        ("35.4×, 86.7×, 34.8× and 6.8× the harness alone", "| 34.8× ("),
        ("35.4×, 86.7×, 34.8× and 6.8× the harness alone", "| 6.8× ("),
    ]),
    ("docs/reliability.md", "fuzz_budget_services.md", [
        ("load average 6.4 to 6.1", "load average 6.4 at the start, 6.1 at the end"),
        ("`readout` 36 accepted / 964 refused, worker CPU 0.65 s",
         "| readout | 1,000 | 36 | 964 | 0 | 0 | 0 | yes | 0.65 ("),
        ("`embedding_db` 35 / 965, 0.68 s", "| embedding_db | 1,000 | 35 | 965 | 0 | 0 | 0 | yes | 0.68 ("),
        ("`service_requests` 125 / 875, 0.53 s",
         "| service_requests | 1,000 | 125 | 875 | 0 | 0 | 0 | yes | 0.53 ("),
        ("worker peak RSS 150, 151 and 161 MB (144 MB at the worker's start", "| 144 / 150 MB |"),
        ("worker peak RSS 150, 151 and 161 MB", "| 144 / 151 MB |"),
        ("worker peak RSS 150, 151 and 161 MB", "| 144 / 161 MB |"),
    ]),
    ("docs/robotics.md", "first_call.md", [  # ranges over the empty- and warm-cache rows
        ("spot 0.30–0.38 vs 0.06–0.07 ms (4.30–6.54×)", "| 0.33–0.38 ms | 0.06–0.06 ms | 5.63–6.54× |"),
        ("spot 0.30–0.38 vs 0.06–0.07 ms (4.30–6.54×)", "| 0.30–0.35 ms | 0.06–0.07 ms | 4.30–6.08× |"),
        ("TTC) 0.44–0.54 vs 0.18–0.20 ms (2.41–2.71×)", "| 0.45–0.54 ms | 0.18–0.20 ms | 2.43–2.71× |"),
        ("TTC) 0.44–0.54 vs 0.18–0.20 ms (2.41–2.71×)", "| 0.44–0.49 ms | 0.18–0.19 ms | 2.41–2.61× |"),
        ("flow 0.52–0.75 vs 0.23–0.25 ms (2.09–3.17×)", "| 0.62–0.75 ms | 0.23–0.24 ms | 2.61–3.17× |"),
        ("flow 0.52–0.75 vs 0.23–0.25 ms (2.09–3.17×)", "| 0.52–0.66 ms | 0.23–0.25 ms | 2.09–2.75× |"),
        ("compass 0.94–1.18 vs 0.26–0.28 ms (3.57–4.29×)", "| 0.95–1.18 ms | 0.27–0.28 ms | 3.57–4.29× |"),
        ("compass 0.94–1.18 vs 0.26–0.28 ms (3.57–4.29×)", "| 0.94–1.05 ms | 0.26–0.27 ms | 3.61–4.02× |"),
        ("pattern 1.71–2.26 vs 0.84–0.92 ms (1.85–2.70×)", "| 1.71–2.26 ms | 0.84–0.92 ms | 1.85–2.70× |"),
        ("pattern 1.71–2.26 vs 0.84–0.92 ms (1.85–2.70×)", "| 1.76–1.90 ms | 0.87–0.88 ms | 2.02–2.16× |"),
    ]),
    ("docs/control_node.md", "first_call.md", [
        ("| 2.45× (1.49–3.91×) | 10.47 ms |",
         "| control, warm-up off | 2.45× | 1.49–3.91× | 3/10 | 16.75 ms | 7.42 ms | 10.47 ms |"),
        ("| 1.57× (1.10–2.00×), 8 of 10 launches ≤ 2× | 3.99 ms |",
         "| control | 1.57× | 1.10–2.00× | 8/10 | 11.38 ms | 7.45 ms | 3.99 ms |"),
        ("| 4.04× (1.98–5.81×) | 14.21 ms |",
         "| bare | 4.04× | 1.98–5.81× | 1/10 | 19.07 ms | 4.90 ms | 14.21 ms |"),
        ("| 2.04× (1.09–3.37×) | 4.18 ms |",
         "| bare, warmed | 2.04× | 1.09–3.37× | 4/10 | 8.18 ms | 4.45 ms | 4.18 ms |"),
        *[("from 6.25 ms (next ones 1.46 ms) to 2.11 ms", row) for row in (
            "| control, warm-up off | first | 3.16 | 1.04 | 6.25 |",
            "| control, warm-up off | next | 1.80 | 0.84 | 1.46 |",
            "| control | first | 2.83 | 1.82 | 2.11 |")],
        ("(7.45 vs 4.45 ms, the handler's 1.42 ms included)",
         "| control | next | 1.88 | 0.47 | 1.44 | 1.42 |"),
    ]),
    ("docs/postprocessing.md", "numpy_call_cost.md", [
        ("a same-shape multiply took 0.413 µs", "| same shape: `multiply(a, b, out=out)` | 0.413 ("),
        ("a (2, 1) column 0.836 µs (2.02x)", "| (2, 1) column: `multiply(a, column, out=out)` | 0.836 ("),
        ("a (2, 1) column 0.836 µs (2.02x)", "| 2.02x |"),
        ("a Python float 0.716 µs (1.73x)", "| Python float: `multiply(a, 0.5, out=out)` | 0.716 ("),
        ("a Python float 0.716 µs (1.73x)", "| 1.73x |"),
        ("load average 3.7:", "load average 3.7 at the start, 3.7 at the end"),
    ]),
    ("docs/robotics.md", "reservoir_fit_cancel.md", [
        ("8.1 s median on the CPU twin", "| 8.1 (7.7–8.7) |"),
        ("at most 58 ms in the drive, 92 ms in a block and 20 ms for the solve",
         "| 58 (50–77) | 92 (87–96) | 20 (19–20) |"),
    ]),
]


def _text(relative: str) -> str:
    return re.sub(r"\s+", " ", (ROOT / relative).read_text(encoding="utf-8"))


def _missing(doc_text: str, result_text: str, pairs: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """(doc texts the doc lacks, result texts the result file lacks)."""
    return [d for d, _ in pairs if d not in doc_text], [r for _, r in pairs if r not in result_text]


@pytest.mark.parametrize("doc,result,pairs", QUOTES, ids=[f"{d}<-{r}" for d, r, _ in QUOTES])
def test_doc_quotes_the_result_file(doc: str, result: str, pairs: list[tuple[str, str]]) -> None:
    missing_doc, missing_result = _missing(_text(doc), _text(f"bench/results/{result}"), pairs)
    assert not missing_doc, f"{doc} no longer quotes: {missing_doc}"
    assert not missing_result, f"bench/results/{result} no longer says {missing_result}: re-run? update {doc}"


def test_a_changed_figure_is_noticed() -> None:
    """A result file whose figure changed (a re-run) no longer matches the doc's quote, and a doc that lost
    the quote is reported too."""
    doc, result, pairs = QUOTES[0]
    doc_text, result_text = _text(doc), _text(f"bench/results/{result}")
    rerun = result_text.replace(pairs[1][1], pairs[1][1].replace("2.64", "2.65"))
    assert _missing(doc_text, rerun, pairs) == ([], [pairs[1][1]])
    assert _missing(doc_text.replace(pairs[1][0], ""), result_text, pairs)[0] == [pairs[1][0]]
    doc, test_file, template = BUDGETS[0]
    cases = _constants(test_file)["CASES"]
    assert isinstance(cases, int)
    assert template.format(CASES=f"{cases + 1:,}", TIME_LIMIT_S="2") not in _text(doc)


def test_first_call_partial_run_keeps_the_other_sections(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """bench_first_call.py run for some parts replaces their sections and keeps the others with their own run
    lines (the report used to be two runs merged by hand, under one run's header)."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    bench = importlib.import_module("bench_first_call")
    report = tmp_path / "first_call.md"
    report.write_text("\n".join([*bench.HEADER, "", "## Import (x)", "", "Run: old import run", "",
                                 "## Control node: y", "", "Run: old node run", "", "| old node |", ""]))
    lines = bench.merged_sections(report, {"## Control node": ["## Control node: y", "", "Run: new", "",
                                                                "| new node |"]})
    text = "\n".join(lines)
    assert "Run: old import run" in text and "Run: new" in text and "| new node |" in text
    assert "old node" not in text and text.index("## Import") < text.index("## Control node")
    assert bench._shown_arguments(["--no-api", "--out", "/tmp/x.md", "--keep", "--launches", "3"]) == (
        " --no-api --launches 3")


# Fuzz budgets the docs state, against the constants of the test that runs them: (doc, test file, doc text
# with ``{NAME}`` replaced by that module-level constant of the test file, thousands separated).
BUDGETS: list[tuple[str, str, str]] = [
    ("docs/reliability.md", "libredgetpu_ros/test/fuzz/test_fuzz_readers.py",
     "`test/fuzz/test_fuzz_readers.py`, {CASES} cases per target, {TIME_LIMIT_S} s and 1 GiB per case"),
    ("docs/reliability.md", "libredgetpu_ros/test/fuzz/test_fuzz_readers.py",
     "the test's {CASES} cases per target"),
    ("docs/reliability.md", "libredgetpu_ros/test/fuzz/test_fuzz_text.py",
     "CI budget: {CASES[iospec]} IOSpec byte mutations, {CASES[iospec_tokens]} YAML-token mutations, "
     "{CASES[yaml]} YAML configs, {CASES[json]} traces JSON, {TIME_LIMIT_S} s and {MEMORY_LIMIT_MB} MiB per "
     "case"),
    ("docs/reliability.md", "libredgetpu_ros/test/fuzz/test_fuzz_services.py",
     "{CASES} cases each in CI, {TIME_LIMIT_S} s and 1 GiB per case"),
    ("docs/reliability.md", "libredgetpu_ros/test/fuzz/test_fuzz_tpulang.py", "{CASES} cases each in CI"),
    ("docs/reliability.md", "libredgetpu_ros/test/fuzz/test_fuzz_image_files.py",
     "`test_fuzz_image_files.py`: {CASES} cases in CI"),
    ("docs/reliability.md", "libredgetpu_ros/test/fuzz/test_fuzz_compressed_frames.py",
     "{CASES} cases in CI"),
    ("docs/reliability.md", "libredgetpu_ros/test/fuzz/test_fuzz_teamtensor.py",
     "{CASES} models, {SEED_CASES} seed packets, {CLAIM_CASES} replay plans"),
    ("docs/reliability.md", "libredgetpu_ros/test/ingenic/test_mgk_malformed.py",
     "| {FUZZ_CASES} mutations, 2 s limit each |"),
    ("docs/sophgo.md", "libredgetpu_ros/test/sophgo/test_tpulang_errors.py",
     "{FUZZ_CASES_BOTH} seeded mutations in CI"),
]


def _constants(relative: str) -> dict[str, object]:
    """Module-level ``NAME = literal`` (and ``A, B = 1, 2``) assignments of a test file, by parsing it."""
    constants: dict[str, object] = {}
    for node in ast.parse((ROOT / relative).read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target = node.targets[0]
        try:
            value = ast.literal_eval(node.value)
        except ValueError:
            continue
        if isinstance(target, ast.Name):
            constants[target.id] = value
        elif isinstance(target, ast.Tuple) and isinstance(value, tuple):
            constants.update({t.id: v for t, v in zip(target.elts, value, strict=True)
                              if isinstance(t, ast.Name)})
    if "FUZZ_CASES" in constants:  # test_tpulang_errors: FUZZ_CASES per fixture case, two cases
        constants["FUZZ_CASES_BOTH"] = 2 * constants["FUZZ_CASES"]
    return constants


def _formatted(value: object) -> object:
    if isinstance(value, dict):
        return {k: _formatted(v) for k, v in value.items()}
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


@pytest.mark.parametrize("doc,test_file,template", BUDGETS, ids=[t.rsplit("/", 1)[1] for _, t, _ in BUDGETS])
def test_doc_states_the_tests_fuzz_budget(doc: str, test_file: str, template: str) -> None:
    constants = {name: _formatted(value) for name, value in _constants(test_file).items()}
    expected = template.format(**constants)
    assert expected in _text(doc), f"{doc} should say {expected!r} (the constants of {test_file})"
