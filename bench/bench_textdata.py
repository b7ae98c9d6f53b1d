"""Cost of reading user YAML / JSON through textdata vs the plain library call, measured in the same run.

- IOSpecs of 3 KB, 150 KB, 400 KB and 3.3 MB (fmot-shaped inputs, the last the size of issue 21's file):
  ``textdata.load_yaml`` (strict UTF-8, the event pass bounding depth and aliases on libyaml's events, then
  PyYAML's pure-Python loader at every size) vs ``yaml.safe_load`` (the pure-Python loader femtorun uses,
  the baseline: the difference is the budget pass) and vs ``yaml.load(Loader=CSafeLoader)`` (libyaml's C
  loader, which textdata does not load with: its verdict differs from PyYAML's on a few texts).
- A 5.1 MB traces JSON: ``textdata.load_json`` (strict UTF-8, NumPy depth scan) vs ``json.loads``.
- A 551-byte alias bomb (10^9 nodes): refused by ``textdata`` (the baseline would walk 10^9 nodes; not run).

CPU time of this thread (``time.thread_time_ns``), best of 3 rounds.

Run: .venv/bin/python bench/bench_textdata.py   (writes bench/results/textdata.md)
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import yaml
from _timing import best_ns, ratio, write_report  # beside this script (its folder is on sys.path)
from libredgetpu_ros.errors import TextDataError

from libredgetpu_ros import textdata

ROUNDS = 3
OUT = Path(__file__).resolve().parent / "results" / "textdata.md"


def iospec_text(n_inputs: int) -> str:
    """An IOSpec shaped like fmot's exports: ``n_inputs`` inputs, one output, one sequence."""
    vec = ("  {name}:\n    type: {kind}\n    varname: {name}\n    length: 16\n    precision: 16\n"
           "    padded_length: 16\n    quantization:\n      scale: 0.000244140625\n      zero_pt: 0\n"
           "    comments: {{}}\n")
    names = [f"in{i}" for i in range(n_inputs)]
    return ("inputs:\n" + "".join(vec.format(name=n, kind="input") for n in names)
            + "outputs:\n" + vec.format(name="out", kind="output")
            + "simple_sequences:\n  seq:\n    type: simple_sequence\n    inputs: [" + ", ".join(names)
            + "]\n    outputs: [out]\n    comments: {}\ncomplex_sequences: {}\n")


def bomb() -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


def main() -> None:
    lines = ["# textdata: bounded YAML / JSON reading", "",
             f"Machine: {platform.machine()}, Python {platform.python_version()}, PyYAML {yaml.__version__} "
             f"(libyaml: {yaml.__with_libyaml__}); thread CPU time, best of {ROUNDS}. Run: "
             "`.venv/bin/python bench/bench_textdata.py`.", "",
             "| input | size | textdata | yaml.safe_load (pure Python, baseline) | textdata / baseline "
             "| C loader alone | textdata / C loader |", "|---|---|---|---|---|---|---|"]
    for n in (16, 800, 2100, 17500):
        text = iospec_text(n)
        ours = best_ns(lambda t=text: textdata.load_yaml(t, max_bytes=1 << 23), ROUNDS)
        base = best_ns(lambda t=text: yaml.safe_load(t), ROUNDS)
        c_only = best_ns(lambda t=text: yaml.load(t, Loader=yaml.CSafeLoader), ROUNDS)
        assert textdata.load_yaml(text, max_bytes=1 << 23) == yaml.safe_load(text)
        lines.append(f"| IOSpec, {n} inputs | {len(text) / 1e6:.3f} MB | {ours / 1e6:.1f} ms | "
                     f"{base / 1e6:.1f} ms | {ratio(ours, base, 2)} | {c_only / 1e6:.1f} ms | "
                     f"{ratio(ours, c_only, 2)} |")
    doc = {"traces": [{"name": f"t{i}", "events": [{"send": ["B", "C"]}, {"recv": "A"}, {"reset": True}]}
                      for i in range(60_000)]}
    raw = json.dumps(doc).encode()
    ours = best_ns(lambda: textdata.load_json(raw), ROUNDS)
    base = best_ns(lambda: json.loads(raw), ROUNDS)
    lines.append(f"| traces JSON | {len(raw) / 1e6:.1f} MB | {ours / 1e6:.1f} ms | json.loads "
                 f"{base / 1e6:.1f} ms | {ratio(ours, base, 2)} | | |")
    text = bomb()

    def refuse() -> None:
        try:
            textdata.load_yaml(text)
        except TextDataError:
            return
        raise AssertionError("the bomb loaded")

    ours = best_ns(refuse, ROUNDS)
    lines.append(f"| alias bomb (10^9 nodes expanded) | {len(text)} B | refused in {ours / 1e6:.2f} ms | "
                 "not run (issue 21: `iospec check` 48 s, 1.78 GB) | | | |")
    lines += ["", "textdata loads every text with PyYAML's pure-Python loader (one verdict whatever the "
              "size: femtorun's, see textdata.py), so it costs what the baseline costs plus the budget pass "
              "(events walked once on libyaml's parser before composing); the C loader column is what "
              "loading with libyaml would cost, for scale. The machine is shared (2 cores, ~8 jobs): thread "
              "CPU time."]
    write_report(OUT, lines)


if __name__ == "__main__":
    main()
