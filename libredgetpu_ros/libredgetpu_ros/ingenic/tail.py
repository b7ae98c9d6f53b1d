"""A guess at where dense weights start inside the data appended after the ELF.

The public AEC sample's weights start 1,792 bytes (7 x 256) after its section header table. One public
reverse-engineering tool (thingino's mgk-decompiler) reads that gap as 256-byte header blocks, each sparse
(a few non-zero bytes, two little-endian int64 values at its start), with the dense weights beginning at the
first block holding more than 200 non-zero bytes. That reading is a hypothesis; ``inspect`` reports it next
to the region it uses and never moves the region on its own (``weights_base`` in a table does).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BLOCK = 256
MAX_BLOCKS = 16            # the gap is looked for in the first 4 KiB only
DENSE_NONZERO = 200        # > this many non-zero bytes in a block: weights
HEADER_NONZERO = 32        # 1..this many: a header block


@dataclass(frozen=True)
class TailGuess:
    dense_offset: int | None                    # file offset of the first dense block, None if none found
    header_blocks: tuple[tuple[int, int, int], ...]   # (file offset, int64 at +0, int64 at +8)

    def as_dict(self) -> dict:
        return {"dense_offset": self.dense_offset,
                "header_blocks": [{"offset": o, "value1": a, "value2": b} for o, a, b in self.header_blocks]}


def guess_dense_start(data: bytes, tail_offset: int) -> TailGuess:
    """Scan whole 256-byte blocks after ``tail_offset`` (vectorised) for the header/dense boundary."""
    count = min(MAX_BLOCKS, (len(data) - tail_offset) // BLOCK)
    if count <= 0:
        return TailGuess(None, ())
    blocks = np.frombuffer(data, np.uint8, count=count * BLOCK, offset=tail_offset).reshape(count, BLOCK)
    nonzero = np.count_nonzero(blocks, axis=1)
    dense = np.flatnonzero(nonzero > DENSE_NONZERO)
    first = int(dense[0]) if dense.size else count
    headers = []
    for k in np.flatnonzero((nonzero[:first] > 0) & (nonzero[:first] <= HEADER_NONZERO)):
        v1, v2 = blocks[k, :16].view("<i8")
        headers.append((tail_offset + int(k) * BLOCK, int(v1), int(v2)))
    return TailGuess(tail_offset + first * BLOCK if dense.size else None, tuple(headers))
