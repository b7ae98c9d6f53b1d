"""Shared by the Team Tensor end-to-end tests and the benchmark: worker process, problems, training runs."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
from libredgetpu_ros.teamtensor import DataSource, nn
from libredgetpu_ros.teamtensor.model import ModelSpec, conv2d, linear, plain
from libredgetpu_ros.teamtensor.wire import LayerCode, Metric

LEARNING_RATE = 0.1
WINDOW = 2
# Loopback answers in well under a millisecond: retransmit quickly so 20 % loss costs little wall time.
FAST_RETRIES = {"timeout": 0.02, "backoff": 1.5, "max_timeout": 0.2, "retries": 200}


@dataclass
class WorkerProcess:
    proc: subprocess.Popen
    address: tuple[str, int]
    stats: dict = field(default_factory=dict)  # filled in from the worker's exit line

    def rss_kb(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


@contextlib.contextmanager
def worker_process(*args: str, timeout: float = 30.0) -> Iterator[WorkerProcess]:
    """``libredgetpu-ros tt-worker --port 0 --json`` in a child process; SIGTERM and its counters at exit."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    # -P: from the repository root, the ROS package folder libredgetpu_ros/ would shadow the Python package
    # (3.11+; _helpers.PYTHON says the same, but this file is loaded by path and cannot import it).
    python = [sys.executable, "-P"] if sys.version_info >= (3, 11) else [sys.executable]
    cmd = [*python, "-m", "libredgetpu_ros.cli.main", "tt-worker", "--port", "0", "--json",
           "--learning-rate", str(LEARNING_RATE), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if ready else ""
        if not line:
            proc.kill()
            raise RuntimeError(f"tt-worker did not start: {proc.communicate(timeout=5)[1][-2000:]}")
        listening = json.loads(line)["listening"]
        handle = WorkerProcess(proc, (listening["host"], listening["port"]))
        yield handle
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    assert proc.returncode == 0, f"tt-worker exited with {proc.returncode}: {err[-2000:]}"
    handle.stats = json.loads(out.strip().splitlines()[-1])["stats"]


# --------------------------------------------------------------------------------------------------
# Problems: a model with its initial weights, training batches, an evaluation batch (all seeded).


@dataclass
class Problem:
    name: str
    model: ModelSpec
    batches: list[tuple[np.ndarray, np.ndarray]]
    evaluation: tuple[np.ndarray, np.ndarray]


def regression(n_batches: int = 100, batch: int = 64, seed: int = 0) -> Problem:
    """y = W·x + b, a Linear(4 -> 2) from zero weights, MSE."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(2, 4)).astype(np.float32)
    b = np.array([0.5, -0.3], np.float32)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.normal(size=(n, 4)).astype(np.float32)
        return x, x @ w.T + b

    model = ModelSpec([linear(np.zeros((2, 4), np.float32))], [Metric.MSE, Metric.MAE])
    return Problem("regression", model, [draw(batch) for _ in range(n_batches)], draw(500))


def classification(n_batches: int = 100, batch: int = 32, seed: int = 1) -> Problem:
    """Horizontal vs vertical bars in noisy 1×6×6 images: Conv2D, ReLU, MaxPool, Flatten, Linear, Softmax."""
    rng = np.random.default_rng(seed)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.normal(scale=0.3, size=(n, 1, 6, 6)).astype(np.float32)
        label, pos = rng.integers(0, 2, n), rng.integers(0, 6, n)
        rows = np.arange(n)
        x[rows[label == 1], 0, pos[label == 1], :] += 1.0
        x[rows[label == 0], 0, :, pos[label == 0]] += 1.0
        return x, np.eye(2, dtype=np.float32)[label]

    model = ModelSpec([
        conv2d(rng.normal(size=(4, 1, 3, 3)) * 0.3, None, pad=1, stride=1, out_width=6, out_height=6),
        plain(LayerCode.RELU), plain(LayerCode.MAXPOOL), plain(LayerCode.FLATTEN),
        linear(rng.normal(size=(2, 36)) * 0.1), plain(LayerCode.SOFTMAX),
    ], [Metric.CROSS_ENTROPY, Metric.ACCURACY])
    return Problem("classification", model, [draw(batch) for _ in range(n_batches)], draw(500))


@dataclass
class Outcome:
    losses: list[float]  # objective after every 10th batch, as the worker reports it
    evaluation: dict[Metric, float]
    weights: list[np.ndarray]
    retransmissions: int = 0
    rejected: int = 0


async def train_remote(address: tuple[str, int], problem: Problem, pipeline: int,
                       retries: dict | None = None, **source: object) -> Outcome:
    """The Data Source side of one training run against a worker at ``address``."""
    async with DataSource(address, **(retries or FAST_RETRIES), **source) as src:
        await src.hello(timeout=20.0)
        await src.assign_pipeline(pipeline)
        assert await src.managers_available() >= 1
        assert await src.assign_model(pipeline, 1, problem.model) == 1
        losses = []
        for i, (x, t) in enumerate(problem.batches):
            await src.send_batch(x, t)
            if i % 10 == 9:
                losses.append(await src.metric(1, problem.model.objective))
        await src.send_batch(*problem.evaluation, evaluate=True)
        evaluation = {m: await src.metric(1, m) for m in problem.model.metrics}
        trained = await src.get_model(1)
        return Outcome(losses, evaluation, trained.parameters(), src.stats.retransmissions,
                       src.stats.rejected_total)


def train_local(problem: Problem) -> Outcome:
    """The same run in this process with the worker's NumPy code: the reference for bit equality."""
    model = problem.model.copy()
    losses = []
    for i, (x, t) in enumerate(problem.batches):
        result = nn.train_step(model, x, t, LEARNING_RATE, WINDOW)
        if i % 10 == 9:
            losses.append(result.metrics[model.objective])
    evaluation = nn.evaluate(model, *problem.evaluation, WINDOW).metrics
    return Outcome(losses, evaluation, model.parameters())
