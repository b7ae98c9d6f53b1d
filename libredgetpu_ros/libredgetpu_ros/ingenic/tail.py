"""The block of sparse 256-byte headers that may sit between the ELF data and the dense weights.

The public AEC sample has 1,792 bytes (7 x 256) after its section header table before the weights the
design seed lists (from 0x79294): three blocks holding two small little-endian int64 at +0 and +8, one
holding two 8-byte words of 0xaa.. bytes, one with two 8-byte words at +0 and +128, two all-zero blocks.
What they mean is unknown, so they are shown as they are (the non-zero 8-byte words, in hex, at their
position) and never read as numbers.

A prefix is recognised only when every block before the first dense block (> 200 non-zero bytes) has at
most ``MAX_HEADER_WORDS`` non-zero 8-byte words and at least one block is not all zero. A sparse first
layer does not pass: a convolution with few input channels still has a non-zero byte in every 32-byte
row of its NMHWSOIB2 blocks, that is 8 non-zero words per 256 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BLOCK = 256
WORD = 8
MAX_BLOCKS = 16            # the prefix is looked for in the first 4 KiB only
DENSE_NONZERO = 200        # > this many non-zero bytes in a block: weights
MAX_HEADER_WORDS = 4       # <= this many non-zero 8-byte words in a block: a header block


@dataclass(frozen=True)
class HeaderBlock:
    offset: int                                 # file offset of the block
    words: tuple[tuple[int, str], ...]          # (position in the block, 8 bytes as hex) of non-zero words

    def as_dict(self) -> dict:
        return {"offset": self.offset, "words": [{"at": at, "hex": text} for at, text in self.words]}


@dataclass(frozen=True)
class Prefix:
    """What lies between the ELF data and the dense weights; ``size == 0`` when nothing was recognised."""

    offset: int
    size: int
    blocks: tuple[HeaderBlock, ...]             # every block of the prefix (all-zero ones with no words)

    def as_dict(self) -> dict:
        return {"offset": self.offset, "size": self.size, "blocks": [b.as_dict() for b in self.blocks]}


def find_prefix(data: bytes, tail_offset: int) -> Prefix:
    """Scan whole 256-byte blocks after ``tail_offset`` (vectorised) for a sparse header prefix."""
    count = min(MAX_BLOCKS, (len(data) - tail_offset) // BLOCK)
    if count <= 0:
        return Prefix(tail_offset, 0, ())
    blocks = np.frombuffer(data, np.uint8, count=count * BLOCK, offset=tail_offset).reshape(count, BLOCK)
    dense = np.flatnonzero(np.count_nonzero(blocks, axis=1) > DENSE_NONZERO)
    if not dense.size or dense[0] == 0:
        return Prefix(tail_offset, 0, ())
    first = int(dense[0])
    words = blocks[:first].reshape(first, BLOCK // WORD, WORD).any(axis=2)
    if words.sum(axis=1).max() > MAX_HEADER_WORDS or not words.any():
        return Prefix(tail_offset, 0, ())
    found = []
    for k in range(first):
        positions = np.flatnonzero(words[k]) * WORD
        found.append(HeaderBlock(tail_offset + k * BLOCK, tuple(
            (int(p), blocks[k, p:p + WORD].tobytes().hex()) for p in positions)))
    return Prefix(tail_offset, first * BLOCK, tuple(found))
