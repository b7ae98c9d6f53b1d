"""Issue 27's harsh network, shared by test_impaired.py (a few seeds) and bench/longrun_teamtensor_impaired.py
(20 seeds): three workloads trained through the impairment proxy against an in-process worker, each run
bounded in time, its outcome compared bit for bit with the same training done without any network.

Harsh: 40 % loss, 20 % duplication, 0-200 ms uniform jitter (which reorders), 1 % single-byte corruption, in
both directions. The worker runs on the caller's event loop (``teamtensor.serve``), one per run, so many
runs proceed at once: their time is spent waiting on the proxy's delays, not on the CPU.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from libredgetpu_ros.teamtensor import WorkerConfig, WorkerCore, serve

HERE = Path(__file__).resolve().parent


def _load_helper():
    """test/_helpers.load_helper, found by path: this file is also loaded by path from bench/."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_test_helpers", HERE.parent / "_helpers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.load_helper


load_helper = _load_helper()
training = load_helper(HERE / "_training.py")
proxy = load_helper(HERE / "_proxy.py")

HARSH = proxy.Impairment(loss=0.4, duplicate=0.2, delay=(0.0, 0.2), corrupt=0.01)
# Retransmit after 0.3 s (x1.5, at most 1.5 s): above most of the jitter, so a try is not resent while its
# reply is still on its way; 200 tries bound one request (the run's deadline bounds the whole run).
HARSH_RETRIES = {"timeout": 0.3, "backoff": 1.5, "max_timeout": 1.5, "retries": 200}
RUN_DEADLINE_S = 240.0


def workloads(seed: int) -> dict[str, training.Problem]:
    """The three workloads of the issue, smaller than the end-to-end test's (20 batches each)."""
    return {
        "regression": training.regression(n_batches=20, batch=64, seed=seed),  # 2 fragments per batch
        "small batches": training.regression(n_batches=20, batch=4, seed=seed),  # one datagram per batch
        "classification": training.classification(n_batches=20, batch=32, seed=seed),  # 4 fragments
    }


@dataclass
class ImpairedRun:
    workload: str
    seed: int
    identical: bool
    seconds: float
    retransmissions: int
    proxy: dict
    worker: dict
    error: str = ""


def _identical(a: training.Outcome, b: training.Outcome) -> bool:
    return (a.losses == [float(np.float32(v)) for v in b.losses]
            and a.evaluation == {m: float(np.float32(v)) for m, v in b.evaluation.items()}
            and all(np.array_equal(x, y) for x, y in zip(a.weights, b.weights, strict=True)))


async def run_one(workload: str, problem: training.Problem, seed: int,
                  impairment: proxy.Impairment = HARSH, key: bytes | None = None) -> ImpairedRun:
    """One training run through the proxy against a fresh in-process worker (HMAC tags and challenged
    claims with ``key``); never raises."""
    core = WorkerCore(WorkerConfig(learning_rate=training.LEARNING_RATE), key=key)
    stop = asyncio.Event()
    ready: asyncio.Future = asyncio.get_running_loop().create_future()
    server = asyncio.ensure_future(serve(core, "127.0.0.1", 0, stop, ready.set_result))
    address = await ready
    p = proxy.ImpairmentProxy(address, impairment, seed=seed)
    front = await p.start()
    t0 = time.monotonic()
    error, outcome = "", None
    try:
        outcome = await asyncio.wait_for(
            training.train_remote(front, problem, pipeline=1, retries=HARSH_RETRIES, key=key), RUN_DEADLINE_S)
    except Exception as exc:  # a run that fails is reported as such, with why
        error = f"{type(exc).__name__}: {exc}"
    seconds = time.monotonic() - t0
    p.close()
    stop.set()
    await server
    reference = training.train_local(problem)
    return ImpairedRun(workload, seed, outcome is not None and _identical(outcome, reference), seconds,
                       outcome.retransmissions if outcome else -1, dict(p.stats), core.stats.as_dict(), error)


KEY = b"harsh-network-key"


async def run_seeds(seeds: list[int], names: list[str] | None = None,
                    keyed: tuple[str, ...] = ()) -> list[ImpairedRun]:
    """Every workload (or ``names``) for every seed, all at once; the ``keyed`` workloads once more with a
    shared key (their ``workload`` ends in " (HMAC)")."""
    jobs = [run_one(name, problem, seed) for seed in seeds
            for name, problem in workloads(seed).items() if names is None or name in names]
    jobs += [run_one(f"{name} (HMAC)", workloads(seed)[name], seed, key=KEY) for seed in seeds
             for name in keyed]
    return list(await asyncio.gather(*jobs))
