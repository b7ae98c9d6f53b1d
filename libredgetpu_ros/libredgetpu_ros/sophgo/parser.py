"""Reads the Top MLIR TpuLang writes (and :mod:`emitter` writes) back into a :class:`Module`.

Both print forms are accepted. This is not a general MLIR parser: it accepts exactly the layout the emitter
produces (one function ``main``, ``top.*`` ops one per line, ``loc`` aliases after the module) and rejects
anything else with a :class:`TpuLangError` naming the line and, once it is known, the op.
"""

from __future__ import annotations

import re
from pathlib import Path

from libredgetpu_ros.sophgo.ir import NONE_TYPE, Module, OpNode, TensorType, TpuLangError
from libredgetpu_ros.sophgo.mlir_cursor import Cursor
from libredgetpu_ros.textdata import clip_repr

MAX_MLIR_BYTES = 64 << 20
MAX_OPS = 200_000
_LOC_ALIAS = re.compile(r"#loc(\d+) = loc\((.*)\)$")
_OP = re.compile(r'\s*%(\d+) = "(top\.[A-Za-z]+)"\((.*?)\)(.*)$')
_VALUE = re.compile(r"%(arg)?(\d+)$")
_MODULE_ATTRS = ("module.chip", "module.platform", "module.state", "module.top_run_mode",
                 "module.weight_file")


def _module_attrs(cur: Cursor) -> dict[str, str]:
    attrs = cur.attr_dict()
    missing = [key for key in _MODULE_ATTRS if not isinstance(attrs.get(key), str)]
    if missing:
        raise cur.fail(f"module attributes lack {', '.join(missing)}")
    return attrs  # type: ignore[return-value]


def _args(cur: Cursor) -> list[TensorType]:
    """``%arg0: T loc(unknown), ...`` up to the closing parenthesis."""
    types: list[TensorType] = []
    if cur.accept(")"):
        return types
    while True:
        cur.expect(f"%arg{len(types)}:")
        types.append(cur.tensor_type())
        cur.expect("loc(unknown)")
        if cur.accept(")"):
            return types
        cur.expect(",")


def _results(cur: Cursor) -> list[TensorType]:
    return cur.type_list() if cur.peek("(") else [cur.tensor_type()]


class _Body:
    """Collects the op lines of ``main`` into OpNodes, checking every operand reference and type."""

    def __init__(self, source: str, arg_types: list[TensorType]) -> None:
        self.source = source
        self.arg_types = arg_types
        self.values: dict[str, tuple[str | None, TensorType]] = {}  # "%3" -> (kind, type)
        self.ops: list[OpNode] = []
        self.pending_locs: list[tuple[OpNode, int]] = []

    def op_line(self, line: str, lineno: int) -> None:
        match = _OP.match(line)
        where = f"{self.source}:{lineno}"
        if not match:
            raise TpuLangError(f"{where}: expected an op line '%N = \"top.X\"(...) ...'")
        number, kind, operand_text, rest = match.groups()
        where = f"{where} ({kind} %{number})"
        if f"%{number}" in self.values or int(number) != len(self.values):
            raise TpuLangError(f"{where}: value %{number} is out of sequence")
        if len(self.values) >= MAX_OPS:
            raise TpuLangError(f"{where}: more than {MAX_OPS} ops")
        operands = [o.strip() for o in operand_text.split(",")] if operand_text.strip() else []
        cur = Cursor(rest, where)
        attrs = cur.attr_dict() if cur.peek("{") else {}
        cur.expect(":")
        operand_types = cur.type_list()
        cur.expect("->")
        result = cur.tensor_type()
        cur.expect("loc(")
        alias = 0 if cur.accept("#loc)") else None
        if alias is None:
            cur.expect("#loc")
            alias = cur.integer()
            cur.expect(")")
        cur.end()
        if len(operand_types) != len(operands):
            raise TpuLangError(f"{where}: {len(operands)} operands but {len(operand_types)} operand types")
        if kind == "top.None":
            if operands or result != NONE_TYPE or int(number) != 0:
                raise TpuLangError(f"{where}: top.None must be %0 with no operands, returning none")
            self.values["%0"] = (None, NONE_TYPE)
            return
        names: list[str | None] = []
        arg_index = None
        for ref, declared in zip(operands, operand_types, strict=True):
            value = _VALUE.match(ref)
            if not value:
                raise TpuLangError(f"{where}: operand {ref!r} is not a value")
            if value.group(1):
                index = int(value.group(2))
                if kind != "top.Input" or index >= len(self.arg_types):
                    raise TpuLangError(f"{where}: operand {ref} is not a function argument of top.Input")
                actual = self.arg_types[index]
                arg_index = index
                names.append(None)
            else:
                if ref not in self.values:
                    raise TpuLangError(f"{where}: operand {ref} is used before it is defined")
                actual = self.values[ref][1]
                names.append(None if ref == "%0" else ref)
            if actual != declared:
                raise TpuLangError(f"{where}: operand {ref} is declared {declared} but has type {actual}")
        if kind == "top.Input":
            if arg_index is None or len(operands) != 1 or result != self.arg_types[arg_index]:
                raise TpuLangError(f"{where}: top.Input must take one function argument and return its type")
            names = [None]
        if kind == "top.Weight" and (operands or result.shape is None):
            raise TpuLangError(f"{where}: top.Weight takes no operands and has a ranked type")
        node = OpNode(kind, "", tuple(names), attrs, result, arg_index)
        self.values[f"%{number}"] = (kind, result)
        self.ops.append(node)
        self.pending_locs.append((node, alias))

    def resolve(self, aliases: dict[int, str]) -> dict[str, str]:
        """Name each op by its ``loc`` alias (defined after the module) and its operands by those names."""
        names: dict[str, str] = {}
        for number, (node, alias) in enumerate(self.pending_locs, start=1):
            if alias not in aliases:
                raise TpuLangError(f"{self.source}: {node.kind} %{number} uses #loc{alias}, which is not "
                                   f"defined")
            node.name = aliases[alias]
            if node.name in names.values():
                raise TpuLangError(f"{self.source}: {node.kind} %{number}: name {clip_repr(node.name)} is "
                                   f"used twice")
            names[f"%{number}"] = node.name
        for node in self.ops:
            if node.kind == "top.Input":
                node.operands = (node.name,)
            else:
                node.operands = tuple(None if ref is None else names[ref] for ref in node.operands)
        return names


def parse_module_lines(lines: list[str], source: str) -> Module:
    if lines and lines[-1] == "":
        lines = lines[:-1]
    if not lines or lines[0] != "#loc = loc(unknown)":
        raise TpuLangError(f"{source}:1: expected '#loc = loc(unknown)'")
    aliases: dict[int, str] = {}
    while len(lines) > 1 and lines[-1].startswith("#loc"):
        match = _LOC_ALIAS.match(lines[-1])
        if not match:
            raise TpuLangError(f"{source}:{len(lines)}: malformed location alias")
        cur = Cursor(match.group(2), f"{source}:{len(lines)}")
        aliases[int(match.group(1))] = cur.string()
        cur.end()
        lines = lines[:-1]
    if len(lines) < 6:
        raise TpuLangError(f"{source}: too short to be a TpuLang module")
    generic = lines[1].startswith('"builtin.module"')
    cur = Cursor(lines[1], f"{source}:2")
    if generic:
        cur.expect('"builtin.module"() <{sym_name =')
        name = cur.string()
        cur.expect("}> ({")
        cur.end()
        cur = Cursor(lines[2], f"{source}:3")
        cur.expect('"func.func"() <{function_type =')
        cur.type_list()
        cur.expect("->")
        declared_results = _results(cur)
        cur.expect(', sym_name = "main"}> ({')
        cur.end()
        cur = Cursor(lines[3], f"{source}:4")
        cur.expect("^bb0(")
        arg_types = _args(cur)
        cur.expect(":")
        cur.end()
        body_start, tail = 4, 2
    else:
        cur.expect("module @")
        name = cur.regex(re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*"), "a module name")
        cur.expect("attributes")
        module_attrs = _module_attrs(cur)
        cur.expect("{")
        cur.end()
        cur = Cursor(lines[2], f"{source}:3")
        cur.expect("func.func @main(")
        arg_types = _args(cur)
        cur.expect("->")
        declared_results = _results(cur)
        cur.expect("{")
        cur.end()
        body_start, tail = 3, 2
    body = _Body(source, arg_types)
    return_index = len(lines) - tail - 1
    for lineno in range(body_start, return_index):
        body.op_line(lines[lineno], lineno + 1)
    if "%0" not in body.values:
        raise TpuLangError(f"{source}: the function body does not start with top.None")
    cur = Cursor(lines[return_index], f"{source}:{return_index + 1}")
    if generic:
        cur.expect('"func.return"(')
        refs = _value_list(cur, ")")
        cur.expect(":")
        returned_types = cur.type_list()
        cur.expect("-> ()")
    else:
        cur.expect("return")
        refs = _value_list(cur, ":")
        returned_types = [cur.tensor_type()]
        while cur.accept(","):
            returned_types.append(cur.tensor_type())
    cur.expect("loc(#loc)")
    cur.end()
    closing = lines[return_index + 1:]
    if generic:
        expected = ["  }) : () -> () loc(#loc)"]
        if closing[:1] != expected:
            raise TpuLangError(f"{source}:{return_index + 2}: expected {expected[0]!r}")
        cur = Cursor(closing[1], f"{source}:{return_index + 3}")
        cur.expect("})")
        module_attrs = _module_attrs(cur)
        cur.expect(": () -> () loc(#loc)")
        cur.end()
    elif closing != ["  } loc(#loc)", "} loc(#loc)"]:
        raise TpuLangError(f"{source}:{return_index + 2}: expected the closing lines '  }} loc(#loc)' and "
                           f"'}} loc(#loc)'")
    names = body.resolve(aliases)
    outputs = []
    for ref, declared, returned in zip(refs, declared_results, returned_types, strict=False):
        if ref not in names:
            raise TpuLangError(f"{source}: returned value {ref} is not an op result")
        if body.values[ref][1] != returned or returned != declared:
            raise TpuLangError(f"{source}: returned value {ref} has type {body.values[ref][1]}, the function "
                               f"declares {declared}")
        outputs.append(names[ref])
    if not (len(refs) == len(declared_results) == len(returned_types)) or not refs:
        raise TpuLangError(f"{source}: the function returns {len(refs)} values but declares "
                           f"{len(declared_results)} results")
    inputs = []
    for index, arg_type in enumerate(arg_types):
        users = [n for n in body.ops if n.kind == "top.Input" and n.arg_index == index]
        if len(users) != 1:
            raise TpuLangError(f"{source}: function argument %arg{index} must feed exactly one top.Input")
        inputs.append((users[0].name, arg_type))
    return Module(name, module_attrs["module.state"], module_attrs["module.weight_file"], inputs, body.ops,
                  outputs, module_attrs["module.chip"], module_attrs["module.platform"],
                  module_attrs["module.top_run_mode"])


def _value_list(cur: Cursor, stop: str) -> list[str]:
    refs = []
    while True:
        ref = cur.regex(re.compile(r"%\d+"), "a value")
        refs.append(ref)
        if cur.accept(stop):
            return refs
        cur.expect(",")


def parse_mlir(text: str, source: str = "<mlir>") -> Module:
    """Parse the text of a ``*_origin.mlir`` file into a Module (errors name the line and op)."""
    if len(text) > MAX_MLIR_BYTES:
        raise TpuLangError(f"{source}: {len(text)} bytes is larger than the {MAX_MLIR_BYTES} accepted")
    return parse_module_lines(text.split("\n"), source)


def load_mlir(path: str | Path) -> Module:
    from libredgetpu_ros.paths import read_regular

    path = Path(path)
    data = read_regular(path, "MLIR file", MAX_MLIR_BYTES, TpuLangError)  # checked on the opened file
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TpuLangError(f"{path}: not UTF-8 text ({exc})") from None
    return parse_mlir(text, str(path))
