"""Fixtures of the .mgk tests: the real MIPS toolchain (a missing one FAILS, never skips) and a synthetic
model built with it once per session."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from .._helpers import load_helper

HERE = Path(__file__).resolve().parent


builder = load_helper(HERE / "_mgk_builder.py")
load_helper(HERE.parent / "fuzz" / "harness.py", "_fuzz_harness")


@pytest.fixture(scope="session")
def mips_toolchain() -> None:
    problem = builder.missing_toolchain()
    if problem:
        pytest.fail(problem, pytrace=False)


@pytest.fixture(scope="session")
def synthetic(mips_toolchain, tmp_path_factory):
    """Six layers (three convolutions off the 32-channel grid, both GRU kinds, a raw blob) after a real
    MIPS32 LE shared object, 1,792 bytes after its end like the AEC sample."""
    workdir = tmp_path_factory.mktemp("mgk")
    layers = builder.random_layers(np.random.default_rng(20261123))
    model = builder.SyntheticMgk(layers, seed=5).build(workdir)
    (workdir / "model.mgk").write_bytes(model.data)
    model.path = workdir / "model.mgk"
    model.workdir = workdir
    return model
