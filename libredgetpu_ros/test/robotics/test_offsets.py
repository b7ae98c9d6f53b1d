"""OffsetDecoder.decode builds its TrackResult with ``tuple.__new__`` (no arity check, for speed): every
result it returns has exactly TrackResult's fields, in order, and equals the named tuple built by keyword."""

from __future__ import annotations

import numpy as np
import pytest
from libredgetpu_ros.robotics.offsets import TrackResult
from libredgetpu_ros.robotics.spot import SpotTracker

FIELDS = ("x_offset", "y_offset", "raw", "version", "valid", "reason", "coverage", "mass", "score",
          "measured")


@pytest.fixture(scope="module")
def decoder():
    with SpotTracker.from_template(64, "red", backend="cpu") as tracker:
        yield tracker.decoder


def test_the_fields_are_the_ones_decode_fills() -> None:
    assert TrackResult._fields == FIELDS


@pytest.mark.parametrize("valid", [True, False])
def test_every_decoded_result_is_a_whole_track_result(decoder, valid: bool) -> None:
    """All 256 × 256 int8 output pairs, valid and not: the right length, fields and values."""
    reason = "ok" if valid else "ambiguous"
    for qx in range(-128, 128, 1):
        for qy in range(-128, 128):
            raw = np.array([[qx, qy]], np.int8)
            result = decoder.decode(raw, 7, valid, reason, 0.02, 0.9)
            assert type(result) is TrackResult and len(result) == len(TrackResult._fields)
            _, _, x, y = decoder.offsets(raw)
            expected = TrackResult(x_offset=x if valid else None, y_offset=y if valid else None, raw=(qx, qy),
                                   version=7, valid=valid, reason=reason, coverage=0.02, mass=0.9, score=None,
                                   measured=(x, y))
            assert result == expected and result._asdict() == expected._asdict()
    default = decoder.decode(np.array([[3, -4]], np.int8))
    assert len(default) == len(FIELDS)
    assert default._asdict() == TrackResult(*default[:2], raw=(3, -4), version=0,
                                            measured=default[:2])._asdict()
