"""``libredgetpu-ros iospec``: check a Femtosense IOSpec file, replay event traces through the engine.

    libredgetpu-ros iospec check spec.yaml [--json]
    libredgetpu-ros iospec run spec.yaml --trace traces.json [--strict] [--json]

``run`` reads traces in the conformance fixtures' format and prints, per trace, ``name``, ``outcome``
(accepted / error), ``error`` (``event_index``, ``type`` = the exception class femtorun 4.1.2 raises there,
``message``) and ``steps`` (``index``, ``result``, for recv ``returned`` and ``ready``). When the file
carries femtorun's recorded verdicts (the fixtures do), ``matches_record`` says whether ours agree.
"""

from __future__ import annotations

import argparse
import json

HELP = "Femtosense SPU: validate an IOSpec (check) or replay sequence traces through it (run)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="iospec_command", metavar="ACTION", required=True)
    check = sub.add_parser("check", help="validate; print vectors, paddings, sequences, latched inputs")
    check.add_argument("file", help="IOSpec YAML")
    check.add_argument("--json", action="store_true", help="print JSON")
    run = sub.add_parser("run", help="replay event traces (fixtures' *_traces.json format)")
    run.add_argument("file", help="IOSpec YAML")
    run.add_argument("--trace", required=True, help="JSON: a list of traces or {traces: [...]}")
    run.add_argument("--strict", action="store_true",
                     help="also apply the SPU firmware's declared-order rules (not part of femtorun)")
    run.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    from libredgetpu_ros.femto import load_iospec

    spec = load_iospec(args.file)
    if args.iospec_command == "check":
        return _check(spec, args.json)
    return _run(spec, args)


def _check(spec, as_json: bool) -> int:
    info = spec.describe()
    names = _ros_names(info, {str(v.key) for v in spec.latched_inputs()})
    # Sends, topics and parameters use varnames; sequences and femtorun's latched list name YAML keys.
    varname = {v["key"]: v["name"] for v in info["inputs"] + info["outputs"]}
    if as_json:
        for section in ("inputs", "outputs"):
            for v in info[section]:
                v.update(names[(section, v["key"])])
        for s in info["sequences"]:
            s["input_names"] = [varname.get(n, n) for n, _ in s["inputs"]]
            s["output_names"] = [varname.get(n, n) for n, _ in s["outputs"]]
        info["latched_input_names"] = [varname.get(k, k) for k in info["latched_inputs"]]
        print(json.dumps(info, indent=2, default=str))  # fields femtorun never checks may hold dates
        return 0
    # Everything is printed by varname, with the key beside it where the two differ.

    def label(key: str) -> str:
        name = varname.get(key, key)
        return name if name == key else f"{name} (key {key})"

    latched = set(info["latched_inputs"])
    print(f"{info['origin']}: valid (femtorun 4.1.2 rules)")
    print("vectors by varname (what sends, recvs, node topics and parameters use):")
    for section in ("inputs", "outputs"):
        print(f"{section}:")
        for v in info[section]:
            tag = "  latched" if v["key"] in latched and section == "inputs" else ""
            words = f"words {v['words_packed']} packed / {v['words_femtodriver']} femtodriver"
            ros = names[(section, v["key"])]
            where = f"  topic {ros['topic']}" + (f", parameter {ros['parameter']}" if "parameter" in ros
                                                  else "")
            print(f"  {label(v['key']):<16} length {v['length']!s:>5} -> padded {v['padded_length']!s:>5}  "
                  f"int{v['precision']}  scale {v['scale']}  zero {v['zero_point']}  {words}{tag}{where}")
    print("sequences (SPU sequence id: name: inputs -> outputs):")
    for s in info["sequences"]:
        ins = ", ".join(label(n) if c == 1 else f"{label(n)}x{c}" for n, c in s["inputs"])
        outs = ", ".join(label(n) if c == 1 else f"{label(n)}/{c}" for n, c in s["outputs"]) or \
            "(latched: no output)"
        print(f"  {s['id']}: {s['name']} [{s['kind']}]: {ins} -> {outs}")
    print(f"latched inputs: {', '.join(label(k) for k in info['latched_inputs']) or 'none'}")
    for w in info["warnings"]:
        print(f"warning: {w}")
    return 0


def _ros_names(info: dict, latched: set[str]) -> dict[tuple[str, str], dict[str, str]]:
    """(section, key) -> the SPU node's topic (and, for the inputs the node latches, its
    ``latched.<varname>`` parameter) for that vector."""
    from libredgetpu_ros.ros.spu.io import topic_token
    from libredgetpu_ros.ros.spu.params import LATCHED_PREFIX

    out = {}
    for section, prefix in (("inputs", "in"), ("outputs", "out")):
        for v in info[section]:
            entry = {"topic": f"~/{prefix}/{topic_token(str(v['name']))}"}
            if section == "inputs" and v["key"] in latched:
                entry["parameter"] = LATCHED_PREFIX + str(v["name"])
            out[(section, v["key"])] = entry
    return out


def _matches(ours: dict, record: dict) -> bool | None:
    if "outcome" not in record or "steps" not in record:
        return None
    if ours["outcome"] != record["outcome"] or len(ours["steps"]) != len(record["steps"]):
        return False
    if record.get("error") and (ours["error"]["event_index"], ours["error"]["type"]) != (
            record["error"]["event_index"], record["error"]["type"]):
        return False
    pairs = zip(ours["steps"], record["steps"], strict=True)
    return all(a.get(k) == b.get(k) for a, b in pairs for k in ("result", "returned", "ready"))


def _run(spec, args: argparse.Namespace) -> int:
    from libredgetpu_ros.femto import SequenceEngine
    from libredgetpu_ros.femto.traces import load_traces, replay_trace

    traces = load_traces(args.trace)
    engine = SequenceEngine(spec, strict=args.strict)
    results = []
    for trace in traces:
        result = replay_trace(engine, trace)
        result["matches_record"] = None if args.strict else _matches(result, trace)
        results.append(result)
    if args.json:
        print(json.dumps(results, indent=2, default=str))
        return 0
    for r in results:
        mark = {True: "  (= femtorun record)", False: "  (DIFFERS from femtorun record)", None: ""}
        mode = "" if r["mode"] == "stop_at_first_error" else f" [{r['mode']}]"
        if r["error"]:
            e = r["error"]
            what = f"error at event {e['event_index']}: {e['type']} ({e['rule']}) {e['detail']}"
        else:
            what = f"accepted, {len(r['steps'])} events"
        print(f"{r['name']}{mode}: {what}{mark[r['matches_record']]}")
    records = [r["matches_record"] for r in results if r["matches_record"] is not None]
    print(f"{len(results)} traces, {sum(r['outcome'] == 'accepted' for r in results)} accepted"
          + (f", {sum(records)}/{len(records)} equal to the recorded femtorun verdicts" if records else ""))
    return 0
