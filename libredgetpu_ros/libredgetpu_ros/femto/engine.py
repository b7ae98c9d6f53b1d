"""The sequence engine: femtorun 4.1.2's IOSpec simulator semantics, plus the SPU firmware's order rules.

Default mode is femtorun-exact (``sim_send_inputs`` / ``sim_recv_outputs`` / ``sim_reset``):

- ``send(name)``: unknown varname -> KeyError kind; a node with a producer (an output's name) ->
  AssertionError kind; otherwise every edge out of the node gets +1 and a sequence whose incoming edges all
  reached their count fires (its outputs' edges +1, its input edges back to 0); any incoming edge above its
  count -> RuntimeError kind ("provided too many inputs before receiving outputs"). No rollback: what was
  incremented before the error stays, as in femtorun.
- ``recv()`` never fails for "not ready": it returns the varnames of all ready outputs in node (declaration)
  order and clears them; it fails (AssertionError kind) when a declared output has no or two producers.

``strict=True`` adds the SPU library's rules (kSpuSequenceError in firmware), checked *before* any state
changes, so a rejected event leaves the engine exactly as it was:

- ``declared-order``: the inputs of an output-producing sequence are written in the order the sequence
  lists them (chained outputs, which a sequence produces and another consumes, are not the host's to
  write: they are left out of that order);
- ``unread-outputs``: a sequence's first input may not be written again while outputs of its previous firing
  are unread (femtorun allows B, C, B before A is read; the firmware does not);
- complex sequences are refused at construction (not supported by the SPU library firmware).

``send(name, atomic=True)`` restores the counts when femtorun's own checks fail, for callers (the ROS node)
that must reject an event without wedging the stream.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from libredgetpu_ros.errors import SpuSequenceError
from libredgetpu_ros.femto.iospec import IOSpec
from libredgetpu_ros.textdata import clip_repr

OVERFLOW_MESSAGE = "Bad input sequence, provided too many inputs before receiving outputs"


class _Overflow(Exception):
    pass


class SequenceEngine:
    """Counts sends and recvs against an IOSpec's sequence graph."""

    def __init__(self, spec: IOSpec, *, strict: bool = False) -> None:
        g = spec.graph
        self.spec = spec
        self.strict = strict
        self._graph = g
        self._succ = g.succ
        self._pred = g.pred
        self._freq = g.frequency
        self._is_out = g.is_output
        self._is_seq = g.is_sequence
        self._var = g.var_to_node
        self._names = g.node_to_var
        self._count = [0] * len(g.edges)
        self._recv = tuple(zip(g.recv_order, g.recv_bad, [g.pred[i][0] if len(g.pred[i]) == 1 else -1
                                                          for i in g.recv_order], strict=True))
        self._recv_names = tuple(g.node_to_var[i] for i in g.recv_order)
        # Outputs take_ready() serves: exactly one producing sequence (whether or not the output also feeds
        # another sequence), as (edge from the producer, varname).
        self._takeable = tuple((edge, name) for (_node, _bad, edge), name in zip(self._recv, self._recv_names,
                                                                                   strict=True) if edge >= 0)
        self.unservable = tuple(name for (_node, _bad, edge), name in zip(self._recv, self._recv_names,
                                                                            strict=True) if edge < 0)
        self._strict_setup(spec)

    # -- strict-mode tables ------------------------------------------------------------------------------
    def _strict_setup(self, spec: IOSpec) -> None:
        g = self._graph
        self._order: dict[int, tuple[int, ...]] = {}       # sequence node -> input nodes in declared order
        self._out_edges: dict[int, tuple[int, ...]] = {}    # sequence node -> edges to its outputs
        self._member: dict[int, tuple[tuple[int, int], ...]] = {}  # input node -> ((seq, position), ...)
        self._pos: dict[int, int] = {}
        if not self.strict:
            return
        complex_seqs = [s.key for s in spec.sequences if s.kind == "complex"]
        if complex_seqs:
            raise SpuSequenceError(
                f"{spec.origin}: strict mode: complex sequences {complex_seqs} are not supported by the SPU "
                "library firmware", kind="strict", rule="complex-sequence")
        member: dict[int, list[tuple[int, int]]] = {}
        for seq in spec.sequences:
            if seq.latched:
                continue  # latched sequences fire on every write: no order to keep
            s = g.index[seq.key]
            # The host writes only nodes no sequence produces: a chained output (``first: [P] -> [M]``,
            # ``second: [M, Q] -> [Y]``) reaches ``second`` inside the SPU when ``first`` fires, so it is
            # written as far as the order goes and the host's order is the rest (else ``second`` would wait
            # for the host to write M and refuse Q for ever).
            order = tuple(n for n in (g.index[k] for k, _ in seq.inputs) if not g.pred[n])
            if not order:
                continue  # fed by chained outputs only: nothing the host writes
            self._order[s] = order
            self._out_edges[s] = tuple(e for e, _ in g.succ[s])
            self._pos[s] = 0
            for position, node in enumerate(order):
                member.setdefault(node, []).append((s, position))
        self._member = {k: tuple(v) for k, v in member.items()}

    def _strict_check(self, node: int, name: str) -> None:
        for s, position in self._member.get(node, ()):
            expected = self._pos[s]
            seq = self._graph.nodes[s]
            if expected == 0 and position == 0 and any(self._count[e] for e in self._out_edges[s]):
                unread = [self._names.get(v, v) for e, v in self._succ[s] if self._count[e]]
                raise SpuSequenceError(
                    f"kSpuSequenceError (unread-outputs): input {name!r} starts sequence {seq!r} again but "
                    f"its "
                    f"outputs {unread} from the previous firing have not been read",
                    kind="strict", rule="unread-outputs")
            if position != expected:
                order = [self._names.get(n, n) for n in self._order[s]]
                raise SpuSequenceError(
                    f"kSpuSequenceError (declared-order): sequence {seq!r} takes its inputs in the order "
                    f"{order}; expected {order[expected]!r} next, got {name!r}",
                    kind="strict", rule="declared-order")

    def _strict_advance(self, node: int) -> None:
        for s, _position in self._member.get(node, ()):
            nxt = self._pos[s] + 1
            self._pos[s] = 0 if nxt == len(self._order[s]) else nxt

    # -- femtorun semantics ------------------------------------------------------------------------------
    def reset(self) -> None:
        """femtorun's ``sim_reset``: every count back to 0."""
        self._count = [0] * len(self._count)
        for s in self._pos:
            self._pos[s] = 0

    def _fire(self, node: int, fired: list) -> None:
        # femtorun's _recurse_node, same order of increments and comparisons (the results depend on it).
        count, freq, pred = self._count, self._freq, self._pred
        for edge, child in self._succ[node]:
            count[edge] += 1
            satisfied = True
            for p in pred[child]:
                if count[p] > freq[p]:
                    raise _Overflow
                if count[p] < freq[p]:
                    satisfied = False
            if satisfied:
                if self._is_seq[child]:
                    fired.append(self._graph.nodes[child])
                self._fire(child, fired)
                if not self._is_out[child]:
                    for p in pred[child]:
                        count[p] = 0

    def send(self, name: Any, *, atomic: bool = False) -> list:
        """Send one input by varname; returns the keys of the sequences it made fire (in firing order)."""
        try:
            node = self._var[name]
        except KeyError:
            raise SpuSequenceError(f"unknown input name {clip_repr(name)} (femtorun: KeyError)",
                                   kind="KeyError", rule="unknown-name",
                                   femtorun_message=repr(name)) from None
        except TypeError as exc:  # an unhashable name
            raise SpuSequenceError(f"input name {clip_repr(name)}: {exc}", kind="TypeError",
                                   rule="unknown-name", femtorun_message=str(exc)) from None
        if self._pred[node]:
            raise SpuSequenceError(
                f"{name!r} is produced by a sequence (an output), it cannot be sent "
                "(femtorun: AssertionError)",
                kind="AssertionError", rule="not-an-input")
        if self._member:
            self._strict_check(node, name)
        saved = self._count[:] if atomic else None
        fired: list = []
        try:
            self._fire(node, fired)
        except _Overflow:
            if saved is not None:
                self._count = saved
            raise SpuSequenceError(
                f"input {name!r}: {OVERFLOW_MESSAGE} (femtorun: RuntimeError)", kind="RuntimeError",
                rule="too-many-inputs", femtorun_message=OVERFLOW_MESSAGE) from None
        except TypeError as exc:  # a complex-sequence count femtorun cannot compare either
            if saved is not None:
                self._count = saved
            raise SpuSequenceError(f"input {name!r}: sequence count is not a number: {exc}", kind="TypeError",
                                   rule="bad-count", femtorun_message=str(exc)) from None
        if self._member:
            self._strict_advance(node)
        return fired

    def send_list(self, names: Iterable[Any]) -> list:
        """femtorun's ``sim_send_inputs(list)``: element by element, earlier ones stay applied on error."""
        fired: list = []
        for name in names:
            fired.extend(self.send(name))
        return fired

    def recv(self) -> list[str]:
        """femtorun's ``sim_recv_outputs``: varnames of every ready output (node order), cleared."""
        out: list[str] = []
        count, freq = self._count, self._freq
        for (node, bad, edge), name in zip(self._recv, self._recv_names, strict=True):
            if bad:
                raise SpuSequenceError(
                    f"output {name!r} has {len(self._pred[node])} producing sequences and "
                    f"{len(self._succ[node])} consumers; femtorun's recv asserts exactly 1 and 0",
                    kind="AssertionError", rule="output-producers")
            if count[edge] == freq[edge]:
                out.append(name)
                count[edge] = 0
        return out

    def take_ready(self) -> list[str]:
        """Ready outputs (declaration order), cleared, without femtorun's all-or-nothing assertion.

        femtorun's ``recv`` fails on every call when any declared output has no producer, two producers or
        also feeds a sequence, so a femtorun-valid spec with one such output can never deliver anything.
        This serves every output that has exactly one producing sequence, including one that also feeds
        another sequence (the engine already propagated it there on the send, as femtorun does); outputs
        without a single producer (``unservable``) are never returned. Never raises. The runners and the
        node use it; ``recv`` stays femtorun-exact for the CLI and the conformance traces."""
        out: list[str] = []
        count, freq = self._count, self._freq
        for edge, name in self._takeable:
            if count[edge] == freq[edge]:
                out.append(name)
                count[edge] = 0
        return out

    def ready(self) -> list[str]:
        """The outputs a ``recv()`` would return now, without clearing them (never raises)."""
        return [name for (_node, bad, edge), name in zip(self._recv, self._recv_names, strict=True)
                if not bad and self._count[edge] == self._freq[edge]]

    def counts(self) -> dict[str, Any]:
        """Edge counts by "from->to" (for diagnostics and tests)."""
        nodes = self._graph.nodes
        edges = zip(self._graph.edges, self._count, strict=True)
        return {f"{nodes[u]}->{nodes[v]}": c for (u, v), c in edges}
