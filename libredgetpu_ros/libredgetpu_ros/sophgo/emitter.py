"""Prints a :class:`Module` exactly as TpuLang 1.30.2 writes ``<name>_origin.mlir``; writes the weight npz.

Two print forms: the pretty one, and MLIR's generic fallback that TpuLang ends up with whenever the function
returns a ``!quant.uniform`` type (its result type is built with signed storage, the signature is parsed as
signless, the verifier rejects the mismatch and MLIR prints generically). ``loc("name")`` aliases are
numbered in print order and listed after the module.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from libredgetpu_ros.atomicio import atomic_open, make_folder
from libredgetpu_ros.sophgo.ir import NONE_TYPE, Module, TensorType, TpuLangError
from libredgetpu_ros.sophgo.mlir_text import format_attr_dict, format_string, format_type
from libredgetpu_ros.sophgo.npz_writer import npz_bytes
from libredgetpu_ros.textdata import clip_repr


def uses_generic_form(module: Module) -> bool:
    return any(module.op(name).result.quant is not None for name in module.outputs)


def _result_list(types: list[str]) -> str:
    return types[0] if len(types) == 1 else "(" + ", ".join(types) + ")"


def emit_mlir(module: Module) -> str:
    generic = uses_generic_form(module)
    values: dict[str | None, str] = {None: "%0"}
    types: dict[str | None, TensorType] = {None: NONE_TYPE}
    aliases: dict[str, int] = {}
    body: list[str] = ['    %0 = "top.None"() : () -> none loc(#loc)']
    for index, node in enumerate(module.ops, start=1):
        alias = aliases.setdefault(node.name, len(aliases) + 1)
        if node.kind == "top.Input":
            operand_names = [f"%arg{node.arg_index}"]
            operand_types = [format_type(node.result)]
        else:
            try:
                operand_names = [values[name] for name in node.operands]
                operand_types = [format_type(types[name]) for name in node.operands]
            except KeyError as exc:
                raise TpuLangError(f"{node.kind} {node.name!r}: operand {exc.args[0]!r} is used before it is "
                                   f"defined") from None
        attrs = format_attr_dict(node.attrs)
        head = f'    %{index} = "{node.kind}"({", ".join(operand_names)})' + (f" {attrs}" if attrs else "")
        body.append(head + f" : ({', '.join(operand_types)}) -> {format_type(node.result)} loc(#loc{alias})")
        values[node.name] = f"%{index}"
        types[node.name] = node.result
    out_values = ", ".join(values[name] for name in module.outputs)
    out_types = [format_type(types[name]) for name in module.outputs]
    arg_types = [format_type(t) for _, t in module.inputs]
    args = ", ".join(f"%arg{i}: {t} loc(unknown)" for i, t in enumerate(arg_types))
    module_attrs = (f'{{module.chip = "{module.chip}", module.platform = "{module.platform}", '
                    f'module.state = "{module.state}", module.top_run_mode = "{module.run_mode}", '
                    f"module.weight_file = {format_string(module.weight_file)}}}")
    lines = ["#loc = loc(unknown)"]
    if generic:
        function_type = f"({', '.join(arg_types)}) -> {_result_list(out_types)}"
        lines.append(f'"builtin.module"() <{{sym_name = {format_string(module.name)}}}> ({{')
        lines.append(f'  "func.func"() <{{function_type = {function_type}, sym_name = "main"}}> ({{')
        lines.append(f"  ^bb0({args}):")
        lines.extend(body)
        lines.append(f'    "func.return"({out_values}) : ({", ".join(out_types)}) -> () loc(#loc)')
        lines.append("  }) : () -> () loc(#loc)")
        lines.append(f"}}) {module_attrs} : () -> () loc(#loc)")
    else:
        lines.append(f"module @{module.name} attributes {module_attrs} {{")
        lines.append(f"  func.func @main({args}) -> {_result_list(out_types)} {{")
        lines.extend(body)
        lines.append(f"    return {out_values} : {', '.join(out_types)} loc(#loc)")
        lines.append("  } loc(#loc)")
        lines.append("} loc(#loc)")
    for name, alias in aliases.items():
        lines.append(f"#loc{alias} = loc({format_string(name)})")
    return "\n".join(lines) + "\n"


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def save_module(module: Module, weights: dict[str, np.ndarray], out_dir: str | Path = ".") -> tuple[Path,
                Path]:
    """Write ``<name>_origin.mlir`` and the weight npz into ``out_dir``; returns both paths.

    Both files are written to temporaries first and renamed into place only once both are complete, so a
    failure part-way (disk full, Ctrl-C) leaves the previous pair as it was."""
    out = make_folder(out_dir)
    mlir_path = out / f"{module.name}_origin.mlir"
    weight_path = out / module.weight_file
    limit = _name_max(out)
    for path in (mlir_path, weight_path):
        if len(os.fsencode(path.name)) > limit:
            raise TpuLangError(f"module name {clip_repr(module.name)} ({len(module.name)} characters) makes "
                               f"the file name {clip_repr(path.name)} longer than the {limit} bytes this "
                               f"file system allows")
    text, npz = emit_mlir(module), npz_bytes(weights)
    with atomic_open(weight_path) as npz_file, atomic_open(mlir_path) as mlir_file:
        npz_file.write(npz)
        mlir_file.write(text.encode("utf-8"))
    return mlir_path, weight_path
