"""The sequence graph of an IOSpec, built like femtorun 4.1.2 builds its networkx DiGraph.

Nodes are the input and output keys plus one node per sequence; edges go input -> sequence (with the input's
count) and sequence -> output (with the output's count). Node and edge order follow networkx's insertion
order, because femtorun's results depend on it (``recv`` returns outputs in node order; a send increments a
node's successors in edge order and stops at the first error). The graph is then compiled to flat lists of
integers, which is what :class:`~libredgetpu_ros.femto.engine.SequenceEngine` walks per event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from libredgetpu_ros.textdata import clip_repr


@dataclass
class SequenceGraph:
    """Compiled graph. Node ``i``: ``succ[i]`` = ((edge, node), ...), ``pred[i]`` = (edge, ...)."""

    nodes: list[Any]                  # networkx node order
    index: dict[Any, int]
    succ: list[tuple[tuple[int, int], ...]]
    pred: list[tuple[int, ...]]
    edges: list[tuple[int, int]]
    frequency: list[Any]              # per edge, as written (femtorun compares whatever the YAML holds)
    is_output: list[bool]             # node is a key of the outputs section
    is_sequence: list[bool]
    var_to_node: dict[str, int]       # send names (varnames) -> node
    node_to_var: dict[int, str]
    recv_order: tuple[int, ...]       # output nodes in node order
    recv_bad: tuple[bool, ...]        # femtorun asserts out_degree == 0 and in_degree == 1 on every recv

    def problems(self) -> list[str]:
        """Structural facts femtorun accepts at load but that break every recv or make names unusable."""
        out = []
        for node, bad in zip(self.recv_order, self.recv_bad, strict=True):
            if bad:
                n = len(self.pred[node])
                what = "no sequence produces it" if n == 0 else f"{n} sequences produce it" if n > 1 else \
                    "it also feeds a sequence"
                out.append(f"output {clip_repr(self.nodes[node], 80)}: {what}; every recv fails "
                           "(femtorun: AssertionError)")
        for i, node in enumerate(self.nodes):
            if i not in self.node_to_var and not self.is_sequence[i]:
                out.append(f"sequence node {clip_repr(node, 80)} is neither a declared input nor output")
        return out


class _DiGraph:
    """The few networkx.DiGraph behaviours femtorun relies on (ordered adjacency, shared edge dicts)."""

    def __init__(self) -> None:
        self.succ: dict[Any, dict[Any, dict]] = {}
        self.pred: dict[Any, dict[Any, dict]] = {}

    def add_node(self, node: Any) -> None:
        if node is None:
            raise ValueError("None cannot be a node")
        if node not in self.succ:
            self.succ[node] = {}
            self.pred[node] = {}

    def add_edge(self, u: Any, v: Any, frequency: Any) -> None:
        self.add_node(u)
        self.add_node(v)
        data = self.succ[u].get(v, {})
        data["frequency"] = frequency
        self.succ[u][v] = data
        self.pred[v][u] = data

    def has_cycle(self) -> bool:
        indegree = {n: len(p) for n, p in self.pred.items()}
        ready = [n for n, d in indegree.items() if d == 0]
        seen = 0
        while ready:
            node = ready.pop()
            seen += 1
            for child in self.succ[node]:
                indegree[child] -= 1
                if indegree[child] == 0:
                    ready.append(child)
        return seen != len(self.succ)


def build_graph(data: dict, where: Any) -> SequenceGraph:
    """femtorun's ``_make_G`` + ``_verify_dag`` on a checked document; raises what femtorun raises."""
    g = _DiGraph()
    var_to_node: dict[str, Any] = {}
    node_to_var: dict[Any, str] = {}
    for objname, obj in (data["inputs"] | data["outputs"]).items():
        varname = obj["varname"]
        where.at(f"inputs/outputs.{objname}.varname (duplicate varname)", varname)
        if objname in node_to_var or varname in var_to_node:
            raise AssertionError()  # femtorun: bare assert
        node_to_var[objname] = varname
        var_to_node[varname] = objname
        g.add_node(objname)
    sequences: list[Any] = []
    for name, obj in data["simple_sequences"].items():
        where.at(f"simple_sequences.{name}", obj)
        g.add_node(name)
        sequences.append(name)
        for o in obj["outputs"]:
            g.add_edge(name, o, 1)
        for i in obj["inputs"]:
            g.add_edge(i, name, 1)
    for name, obj in data["complex_sequences"].items():
        where.at(f"complex_sequences.{name}", obj)
        g.add_node(name)
        sequences.append(name)
        for o, count in obj["outputs"].items():
            g.add_edge(name, o, count)
        for i, count in obj["inputs"].items():
            g.add_edge(i, name, count)
    where.at("sequences", None)
    if g.has_cycle():
        raise ValueError("IO spec does not contain a graph without cycles")
    return _compile(g, data["outputs"], sequences, var_to_node, node_to_var)


def _compile(g: _DiGraph, outputs: dict, sequences: list, var_to_node: dict,
             node_to_var: dict) -> SequenceGraph:
    nodes = list(g.succ)
    index = {n: i for i, n in enumerate(nodes)}
    edges: list[tuple[int, int]] = []
    frequency: list[Any] = []
    edge_of: dict[int, int] = {}  # id(edge dict) -> edge index (the dict is shared by succ and pred)
    for u in nodes:
        for v, data in g.succ[u].items():
            edge_of[id(data)] = len(edges)
            edges.append((index[u], index[v]))
            frequency.append(data["frequency"])
    succ = [tuple((edge_of[id(d)], index[v]) for v, d in g.succ[n].items()) for n in nodes]
    pred = [tuple(edge_of[id(d)] for d in g.pred[n].values()) for n in nodes]
    seq_nodes = {index[s] for s in sequences}
    is_output = [n in outputs for n in nodes]
    recv_order = tuple(i for i in range(len(nodes)) if is_output[i])
    recv_bad = tuple(len(succ[i]) != 0 or len(pred[i]) != 1 for i in recv_order)
    return SequenceGraph(
        nodes=nodes, index=index, succ=succ, pred=pred, edges=edges, frequency=frequency, is_output=is_output,
        is_sequence=[i in seq_nodes for i in range(len(nodes))],
        var_to_node={v: index[n] for v, n in var_to_node.items()},
        node_to_var={index[n]: v for n, v in node_to_var.items()},
        recv_order=recv_order, recv_bad=recv_bad)
