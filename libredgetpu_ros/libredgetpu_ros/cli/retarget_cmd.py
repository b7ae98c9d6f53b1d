"""``libredgetpu-ros retarget``: a new compiled template with another colour / reference patch, no compiler.

``retarget MODEL --color R G B -o OUT_edgetpu.tflite`` (spot colour templates) or ``--template PATCH``
(pattern templates) swaps the values in as the modules do at run time and writes the compiled model with
the new parameter bytes; an ``OUT`` named ``NAME_edgetpu.tflite`` also gets its twin ``NAME.tflite`` and the
sidecar, so it loads as a template; the three replace a previous set as one unit (robotics/template_set.py:
after a kill at any point, the set at OUT loads, old or new).
"""

from __future__ import annotations

import argparse
import json
import sys

HELP = "write a compiled robotics template with a new colour or reference patch (no edgetpu_compiler)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="compiled *_edgetpu.tflite (or template name / twin / sidecar)")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--color", nargs=3, type=float, metavar=("R", "G", "B"),
                      help="colour filter weights (spot colour templates), e.g. -0.5 1 -0.5")
    what.add_argument("--template", metavar="PATCH", help="reference patch image (pattern templates)")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.tflite", help="compiled model to write")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args: argparse.Namespace) -> int:
    from libredgetpu_ros.atomicio import atomic_write_bytes
    from libredgetpu_ros.errors import ConfigError
    from libredgetpu_ros.robotics.retarget import output_names, retarget
    from libredgetpu_ros.robotics.template import load_template
    from libredgetpu_ros.robotics.template_set import write_set

    template = load_template(args.model)
    if args.color is not None:
        from libredgetpu_ros.robotics.spot import SpotTracker

        module = SpotTracker(template, backend="none")
        swap = module.set_color(args.color)
        if swap.clipped and not args.json:
            from libredgetpu_ros.cli.robotics_cmd import warn_clipped

            warn_clipped(args.color, swap)
        details = {"weights": list(swap.weights), "real": list(swap.color), "clipped": swap.clipped,
                   "scale": swap.scale}
        sidecar_update = {"variant": "color_custom"}
    else:
        from libredgetpu_ros.perception.images import load_image
        from libredgetpu_ros.robotics.pattern import PatternTracker

        if "conv_weight_offsets" not in template.sidecar:
            raise ConfigError(f"template {template.name} is not a pattern template (--template needs one)")
        module = PatternTracker(template, backend="none")
        swap = module.set_template(load_image(args.template))  # grey for a one-channel template
        details = {"gain": swap.gain}
        sidecar_update = {}
    result = retarget(template, module.runner.parameters)
    compiled_path, twin_path, sidecar_path = output_names(args.output)
    if twin_path is not None and sidecar_path is not None:  # a template: its three files as one unit
        sidecar = json.dumps(dict(template.sidecar, **sidecar_update), indent=2) + "\n"
        files = {compiled_path.name: result.compiled, twin_path.name: result.twin,
                 sidecar_path.name: sidecar.encode()}
        written = [str(p) for p in write_set(twin_path.with_suffix(""), files)]
    else:
        atomic_write_bytes(compiled_path, result.compiled)
        written = [str(compiled_path)]
    report = {"source": str(template.compiled_path), "written": written, "changed_bytes": result.changed,
              **details}
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        changed = ", ".join(f"{k}: {v} byte(s)" for k, v in result.changed.items())
        print(f"wrote {', '.join(written)} ({changed} changed)")
    return 0
