"""A vLLM logits processor that only waits: every engine step takes `STEP_SECONDS` longer, its outputs unchanged.

tests/cli/test_interrupts.py signals a run while the demo model works on a phase; on two idle cores the model answers a
recovery pass in a tenth of a second, shorter than a busy machine takes to wake the test. tests/engines/test_engine_death.py
kills the engine core after the first answers are committed: the tiny model answers the other 95 in under a second. Waiting (not computing) makes
each phase last seconds without costing CPU. vLLM loads it by name (`engine.args.logits_processors`), in whichever
process runs the model.
"""

from __future__ import annotations

import time
from typing import Any

from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

STEP_SECONDS = 0.05


class SlowSteps(LogitsProcessor):
    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
        pass

    def is_argmax_invariant(self) -> bool:
        return True  # it never changes a logit

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        time.sleep(STEP_SECONDS)  # called before every forward pass

    def apply(self, logits: Any) -> Any:
        return logits
