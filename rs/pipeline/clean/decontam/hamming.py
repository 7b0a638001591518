"""Find every 64-bit hash within a Hamming distance of a query without comparing every pair: multi-index hashing.

Each hash is cut into four 16-bit blocks. Two hashes at distance d differ in some block by at most d // 4 bits
(pigeonhole), so a query looks up, in each block's table, its own block and every block value within d // 4 bits
of it, and only those candidates are compared in full (Norouzi, Punjani and Fleet, "Fast Search in Hamming Space
with Multi-Index Hashing", CVPR 2012). Queries run in NumPy batches; the tables are CSR arrays (flat memory:
two int arrays per block).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

BLOCKS = 4
BLOCK_BITS = 16


def _masks(radius: int) -> np.ndarray:
    """Every 16-bit value with at most `radius` bits set."""
    out = [0]
    for r in range(1, radius + 1):
        out += [sum(1 << b for b in bits) for bits in combinations(range(BLOCK_BITS), r)]
    return np.array(out, dtype=np.int64)


class HammingIndex:
    """64-bit codes (`ids[i]` owns `codes[i]`), searched at a fixed maximum distance."""

    def __init__(self, codes: np.ndarray, ids: np.ndarray, max_distance: int):
        if not 0 <= max_distance < 64:
            raise ValueError(f"max_distance must be from 0 to 63, got {max_distance}")
        self.codes = np.asarray(codes, dtype=np.uint64)
        self.ids = np.asarray(ids, dtype=np.int64)
        self.max_distance = max_distance
        self.masks = _masks(max_distance // BLOCKS)
        self.tables = []
        for b in range(BLOCKS):
            keys = self._block(self.codes, b)
            order = np.argsort(keys, kind="stable")
            offsets = np.zeros((1 << BLOCK_BITS) + 1, dtype=np.int64)
            np.cumsum(np.bincount(keys, minlength=1 << BLOCK_BITS), out=offsets[1:])
            self.tables.append((order, offsets))

    def __len__(self) -> int:
        return len(self.codes)

    @staticmethod
    def _block(codes: np.ndarray, b: int) -> np.ndarray:
        return ((codes >> np.uint64(b * BLOCK_BITS)) & np.uint64(0xFFFF)).astype(np.int64)

    def search(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`(query_position, id, distance)` of every indexed code within `max_distance` of a query, each pair once."""
        queries = np.asarray(queries, dtype=np.uint64)
        pairs = []
        for b, (order, offsets) in enumerate(self.tables):
            keys = (self._block(queries, b)[:, None] ^ self.masks[None, :]).ravel()
            starts, counts = offsets[keys], offsets[keys + 1] - offsets[keys]
            total = int(counts.sum())
            if total == 0:
                continue
            owner = np.repeat(np.arange(len(keys)) // len(self.masks), counts)
            within = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
            pairs.append(owner * len(self.codes) + order[np.repeat(starts, counts) + within])
        if not pairs:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        candidates = np.concatenate(pairs)
        query, row = candidates // len(self.codes), candidates % len(self.codes)
        near = np.bitwise_count(queries[query] ^ self.codes[row]) <= self.max_distance
        unique = np.unique(
            candidates[near]
        )  # a pair found in several blocks once (few pairs are near: unique them only)
        query, row = unique // len(self.codes), unique % len(self.codes)
        return query, self.ids[row], np.bitwise_count(queries[query] ^ self.codes[row]).astype(np.int64)
