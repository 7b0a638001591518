"""MinHash LSH over an index's stored signatures: a question's candidates are the questions sharing a whole band.

The banding is datasketch's (`MinHashLSH`'s bands and rows for the threshold), so the candidates are the ones its LSH
gives; the tables are made from the signatures array in one pass instead of one `insert` a question, which made
reading a cached index of 3,000 questions take 0.6 s instead of 0.05 s.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np


class BandIndex:
    """Candidates for a near-duplicate question: `query(signature)` gives the question numbers of `ids` that share at
    least one band of `signatures` (one row each, datasketch's hash values) with it."""

    def __init__(self, signatures: np.ndarray, ids: np.ndarray, *, threshold: float, num_perm: int):
        from datasketch import MinHashLSH

        self.ranges: list[tuple[int, int]] = list(MinHashLSH(threshold=threshold, num_perm=num_perm).hashranges)
        self.tables: list[dict[bytes, list[int]]] = []
        numbers = ids.tolist()
        for start, end in self.ranges:
            band = np.ascontiguousarray(signatures[:, start:end])
            keys = band.view(np.dtype((np.void, band.dtype.itemsize * (end - start)))).ravel().tolist()
            table: dict[bytes, list[int]] = defaultdict(list)
            for key, number in zip(keys, numbers):
                table[key].append(number)
            self.tables.append(dict(table))

    def query(self, signature: np.ndarray) -> set[int]:
        found: set[int] = set()
        for (start, end), table in zip(self.ranges, self.tables):
            found.update(table.get(np.ascontiguousarray(signature[start:end]).tobytes(), ()))
        return found
