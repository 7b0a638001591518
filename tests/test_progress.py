"""Progress lines in a log: the rate and the time left count from the first item, not from the stage's start (a model's
load before the first answer made a one-second job say `0:49:59 left`)."""

from __future__ import annotations

import logging

import pytest

from rs import progress


def test_the_time_left_counts_from_the_first_item_not_the_load_before_it(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    now = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    caplog.set_level(logging.INFO, logger="rs.progress")
    bar = progress.LogProgress(100, "sampling")
    monkeypatch.setattr(progress, "LOG_EVERY_S", 2.0)
    for second in (600.0, 601.0, 602.0):  # the model loads for 600 s, then an item a second; lines at 600 s and 602 s
        now[0] = second
        bar.update()
    line = caplog.records[-1].getMessage()
    assert line == "sampling: 3/100 items (1.0/s, 0:10:02 so far, 0:01:37 left)", line
