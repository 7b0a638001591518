"""`make demo-samples`: the demo with TinyCLEVR's samples repo and RL repo switched on.

Writes a families file that is the shipped one with two lines of TinyCLEVR changed: every accepted question is
sampled 4 times too (`difficulty`, so that every question has a pass rate) and the RL repo is published
(`rl: {}`: pass rates strictly between 0 and 1), and `publish.samples` publishes every answer. The main demo stays
as fast as it was: the difficulty samples are what this variant adds to its run.

    python scripts/demo_samples.py build/demo-samples/families.yaml
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHANGES = {
    "    recovery: {samples: 4, temperature: 0.7, pairs: true}\n": "    recovery: {samples: 4, temperature: 0.7, pairs: true, difficulty: {samples: 4, rl: {}}}\n",
    "    publish: {namespace: local, target: local}\n": "    publish: {namespace: local, target: local, samples: true}\n",
}
"""TinyCLEVR's lines in the shipped families.yaml, and what the variant says instead."""


def variant(text: str) -> str:
    """The shipped families file's text with TinyCLEVR's samples and RL repos switched on."""
    for shipped, changed in CHANGES.items():
        if text.count(shipped) != 1:
            raise SystemExit(f"families.yaml: expected TinyCLEVR's line {shipped.strip()!r} once; update {__file__}")
        text = text.replace(shipped, changed)
    return text


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(variant((ROOT / "families.yaml").read_text()))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
