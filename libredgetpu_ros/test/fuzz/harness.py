"""Seeded, bounded fuzzing of byte readers with per-case time and memory limits. Reusable for any reader.

API::

    from .harness import FuzzTarget, fuzz, run_guarded

    target = FuzzTarget(
        name="myformat",
        seeds=[real_file_bytes, ...],        # real inputs to mutate (fixture files, option blobs)
        run=consume,                         # bytes -> anything: the reader plus what a consumer does next
        allowed=(InputError,),               # typed refusals; any other exception is a failure
        hot=lambda seed: [(0, 4096)],        # optional: byte ranges to mutate more often (headers, tails)
    )
    report = fuzz(target, cases=2000, seed=1, time_limit_s=2.0, memory_limit_mb=768)
    assert report.ok, report.summary()

    outcome = run_guarded(consume, crafted_bytes, allowed=(InputError,))   # one hand-made input
    assert outcome.kind == "refused", outcome

    check_budget(target, 2000, time_limit_s=2.0, memory_limit_mb=1024,    # a CI test of one target
                 min_refused=200, min_accepted=200)
    sys.exit(long_run("long fuzz run of X", lambda names: my_targets(),   # a target file's main()
                      cases=100_000, time_limit_s=5.0, memory_limit_mb=1024))

Case ``i`` of a run is built from ``(seed, i)`` alone (``target.case(seed, i)`` rebuilds it to replay a
failure). Mutations (1-4 per case): bit flips, random bytes, size-like fields (1/2/4/8-byte words set to
0, -1, 2^31-1, the file length, the old value with its high bytes changed, ...), truncation, splices (a
chunk copied elsewhere in the same input or from another seed, including single 4-byte words, which turns
offsets into shared references), chunk insertion and deletion.

Cases run in a forked worker whose address space is capped (RLIMIT_AS = its size at fork +
``memory_limit_mb``), so an allocation blow-up fails as MemoryError there (counted as untyped) instead of
exhausting the machine. The parent allows every case ``time_limit_s``; a slower case is a hang: the worker
is killed and a fresh one goes on with the next case. A worker that dies otherwise (signal) is a crash.
``FuzzReport``: cases, accepted, refused (typed), untyped, hangs, crashes, the first failures (case number,
kind, message), the slowest case, and the workers' RSS at start and at peak.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import os
import random
import resource
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

_INTERESTING = (0, 1, 2, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000,
                0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF, 0x7FFFFFFFFFFFFFFF)


@dataclass
class FuzzTarget:
    name: str
    seeds: Sequence[bytes]
    run: Callable[[bytes], Any]
    allowed: tuple[type[BaseException], ...]
    hot: Callable[[bytes], Sequence[tuple[int, int]]] | None = None
    _hot_cache: dict[int, Sequence[tuple[int, int]]] = field(default_factory=dict, repr=False)

    def _hot(self, k: int) -> Sequence[tuple[int, int]]:
        if k not in self._hot_cache:
            seed = self.seeds[k]
            ranges = self.hot(seed) if self.hot else ()
            self._hot_cache[k] = [(max(0, a), min(len(seed), b)) for a, b in ranges if b > a]
        return self._hot_cache[k]

    def case(self, seed: int, i: int) -> bytes:
        """Mutated input number ``i`` of the run seeded ``seed`` (deterministic)."""
        rng = random.Random(f"{self.name}:{seed}:{i}")
        k = rng.randrange(len(self.seeds))
        data = bytearray(self.seeds[k])
        hot = self._hot(k)
        for _ in range(rng.randint(1, 4)):
            data = _mutate(rng, data, hot, self.seeds)
        return bytes(data)


def _pos(rng: random.Random, n: int, hot: Sequence[tuple[int, int]]) -> int:
    if hot and rng.random() < 0.6:
        lo, hi = rng.choice(hot)
        if hi > lo:
            return min(rng.randrange(lo, hi), n - 1)
    return rng.randrange(n)


def _mutate(rng: random.Random, data: bytearray, hot: Sequence[tuple[int, int]],
            seeds: Sequence[bytes]) -> bytearray:
    n = len(data)
    if n == 0:
        return bytearray(rng.randbytes(rng.randint(1, 16)))
    op = rng.random()
    p = _pos(rng, n, hot)
    if op < 0.2:  # bit flip
        data[p] ^= 1 << rng.randrange(8)
    elif op < 0.35:  # random byte
        data[p] = rng.randrange(256)
    elif op < 0.65:  # a size / offset / count field
        width = rng.choice((1, 2, 4, 4, 4, 8))
        p -= p % width
        if p + width > n:
            return data
        old = int.from_bytes(data[p:p + width], "little")
        value = rng.choice((
            rng.choice(_INTERESTING), n, n + rng.randint(-16, 16), old + rng.randint(-64, 64),
            old * 2, old | (rng.randrange(1, 0x8000) << 16), old ^ (1 << rng.randrange(8 * width)),
        ))
        data[p:p + width] = (value % (1 << (8 * width))).to_bytes(width, "little")
    elif op < 0.72:  # truncation
        return data[:p]
    elif op < 0.9:  # splice: a chunk (often one 4-byte word, i.e. an offset) copied over another place
        src = data if rng.random() < 0.8 else bytearray(rng.choice(seeds))
        length = 4 if rng.random() < 0.5 else rng.randint(1, 256)
        a = rng.randrange(max(1, len(src) - length))
        chunk = src[a:a + length]
        if length == 4:
            p -= p % 4
        data[p:p + len(chunk)] = chunk
    elif op < 0.95:  # insertion (shifts everything after it)
        data[p:p] = rng.randbytes(rng.choice((1, 4, rng.randint(1, 64))))
    else:  # deletion
        del data[p:p + rng.choice((1, 4, rng.randint(1, 64)))]
    return data


@dataclass
class Outcome:
    kind: str  # "accepted" | "refused" | "untyped" | "hang" | "crash"
    message: str = ""
    seconds: float = 0.0


@dataclass
class FuzzReport:
    target: str
    cases: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("accepted", "refused", "untyped", "hang", "crash"), 0))
    failures: list[tuple[int, str, str]] = field(default_factory=list)  # (case, kind, message), first 10
    slowest: tuple[float, int] = (0.0, -1)  # (seconds, case)
    peak_rss_mb: float = 0.0
    start_rss_mb: float = 0.0  # a worker's RSS when it starts (inherited from the parent by fork)
    wall_s: float = 0.0
    last: Outcome | None = None  # the latest case's outcome (run_guarded returns it)

    @property
    def ok(self) -> bool:
        return self.counts["untyped"] == self.counts["hang"] == self.counts["crash"] == 0

    def add(self, i: int, outcome: Outcome) -> None:
        self.cases += 1
        self.counts[outcome.kind] += 1
        self.last = outcome
        if outcome.kind in ("untyped", "hang", "crash") and len(self.failures) < 10:
            self.failures.append((i, outcome.kind, outcome.message))
        if outcome.seconds > self.slowest[0]:
            self.slowest = (outcome.seconds, i)

    def summary(self) -> str:
        c = self.counts
        lines = [f"{self.target}: {self.cases} cases in {self.wall_s:.1f} s: {c['accepted']} accepted, "
                 f"{c['refused']} refused (typed), {c['untyped']} untyped, {c['hang']} hangs, "
                 f"{c['crash']} crashes; slowest case {self.slowest[1]} {self.slowest[0] * 1e3:.1f} ms; "
                 f"worker RSS {self.start_rss_mb:.0f} MB at start, peak {self.peak_rss_mb:.0f} MB"]
        lines += [f"  case {i}: {kind}: {msg}" for i, kind, msg in self.failures]
        return "\n".join(lines)


def _classify(run: Callable[[bytes], Any], data: bytes, allowed: tuple[type[BaseException], ...]) -> Outcome:
    start = time.perf_counter()
    try:
        run(data)
        kind, message = "accepted", ""
    except allowed as exc:
        kind, message = "refused", f"{type(exc).__name__}: {exc}"[:300]
    except Exception as exc:  # an untyped error is exactly what the fuzzer looks for
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        kind = "untyped"
        message = f"{type(exc).__name__}: {str(exc)[:200]} at {os.path.basename(tb.filename)}:{tb.lineno}"
    return Outcome(kind, message, time.perf_counter() - start)


def _limit_memory(memory_limit_mb: int) -> None:
    with open("/proc/self/statm") as f:
        vm_bytes = int(f.read().split()[0]) * resource.getpagesize()
    limit = vm_bytes + memory_limit_mb * (1 << 20)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / (1 << 20)


def _worker(conn: Any, target: FuzzTarget, seed: int, first: int, end: int, memory_limit_mb: int,
            fixed: bytes | None) -> None:
    # Objects inherited from the parent are the parent's to destroy: a collection here would run their
    # finalizers in a process where their threads and handles no longer exist (an rclpy node left as cyclic
    # garbage by an earlier test segfaulted the worker's first collection).
    gc.freeze()
    conn.send(("start", _rss_mb()))
    _limit_memory(memory_limit_mb)
    for i in range(first, end):
        data = fixed if fixed is not None else target.case(seed, i)
        out = _classify(target.run, data, target.allowed)
        del data
        conn.send((i, out.kind, out.message, out.seconds))
    conn.send(("end", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0))
    conn.close()


def fuzz(target: FuzzTarget, cases: int, seed: int = 1, time_limit_s: float = 2.0,
         memory_limit_mb: int = 768, first: int = 0,
         progress: Callable[[FuzzReport], None] | None = None) -> FuzzReport:
    """Run cases ``first .. first + cases - 1`` of ``target`` in guarded workers; see the module docstring."""
    return _drive(target, seed, first, first + cases, time_limit_s, memory_limit_mb, None, progress)


def run_guarded(run: Callable[[bytes], Any], data: bytes, allowed: tuple[type[BaseException], ...],
                time_limit_s: float = 10.0, memory_limit_mb: int = 1024) -> Outcome:
    """One input through ``run`` under the same limits as a fuzz case (for hand-made hostile inputs)."""
    target = FuzzTarget("guarded", [data], run, allowed)
    report = _drive(target, 0, 0, 1, time_limit_s, memory_limit_mb, data, None)
    assert report.last is not None
    return report.last


def check_budget(target: FuzzTarget, cases: int, *, time_limit_s: float, memory_limit_mb: int,
                 min_refused: int, min_accepted: int) -> FuzzReport:
    """The CI check of one target (seed 1): all ``cases`` ran, none failed, and both verdicts occur more
    often than the minimums, or the mutations are not reaching past the reader's first check."""
    report = fuzz(target, cases, seed=1, time_limit_s=time_limit_s, memory_limit_mb=memory_limit_mb)
    print(report.summary())
    assert report.cases == cases, f"{report.cases} of {cases} cases ran\n{report.summary()}"
    assert report.ok, report.summary()
    counts = report.counts
    assert counts["refused"] > min_refused and counts["accepted"] > min_accepted, (
        f"needs more than {min_refused} refused and {min_accepted} accepted\n{report.summary()}")
    return report


def long_run(description: str, build: Callable[[list[str] | None], dict[str, FuzzTarget]], *, cases: int,
             time_limit_s: float, memory_limit_mb: int, argv: Sequence[str] | None = None) -> int:
    """The command line of a long run, shared by the target files: ``build(names or None)`` makes the
    targets (``names``: the ``--target`` choices, so a file can skip building seeds nobody asked for);
    each chosen target runs with a progress line every 1,000 cases and a ``FINAL`` summary. Exit code 0
    when no case failed."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--cases", type=int, default=cases, help="cases per target")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--first", type=int, default=0, help="first case number (to continue a run)")
    parser.add_argument("--target", action="append", help="only these targets (default: all)")
    parser.add_argument("--time-limit", type=float, default=time_limit_s, help="seconds per case")
    parser.add_argument("--memory-limit-mb", type=int, default=memory_limit_mb)
    args = parser.parse_args(argv)
    all_targets = build(args.target)
    ok = True
    for name in args.target or list(all_targets):
        report = fuzz(all_targets[name], args.cases, args.seed, args.time_limit, args.memory_limit_mb,
                      first=args.first, progress=lambda r: print(r.summary().splitlines()[0], flush=True))
        print("FINAL " + report.summary(), flush=True)
        ok &= report.ok
    return 0 if ok else 1


def _drive(target: FuzzTarget, seed: int, first: int, end: int, time_limit_s: float, memory_limit_mb: int,
           fixed: bytes | None, progress: Callable[[FuzzReport], None] | None) -> FuzzReport:
    ctx = mp.get_context("fork")
    gc.collect()  # finalize the parent's garbage in the parent, before workers inherit it
    report = FuzzReport(target.name)
    started = time.perf_counter()
    nxt = first
    while nxt < end:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_worker, args=(child, target, seed, nxt, end, memory_limit_mb, fixed),
                           daemon=True)
        proc.start()
        child.close()
        while True:
            if parent.poll(time_limit_s):
                try:
                    msg = parent.recv()
                except EOFError:  # the worker died between two cases
                    report.add(nxt, Outcome("crash", f"worker exit code {proc.join(5) or proc.exitcode}"))
                    nxt += 1
                    break
                if msg[0] == "start":
                    report.start_rss_mb = max(report.start_rss_mb, msg[1])
                    continue
                if msg[0] == "end":
                    report.peak_rss_mb = max(report.peak_rss_mb, msg[1])
                    nxt = end
                    break
                i, kind, message, seconds = msg
                report.add(i, Outcome(kind, message, seconds))
                nxt = i + 1
                if progress is not None and report.cases % 1000 == 0:
                    report.wall_s = time.perf_counter() - started
                    progress(report)
            else:
                proc.kill()
                report.add(nxt, Outcome("hang", f"no result within {time_limit_s} s", time_limit_s))
                nxt += 1
                break
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join()
        parent.close()
    report.wall_s = time.perf_counter() - started
    return report
