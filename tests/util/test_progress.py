"""Progress lines in a log: the rate and the time left count from the first item, not from the stage's start (a model's
load before the first answer made a one-second job say `0:49:59 left`)."""

from __future__ import annotations

import logging

import pytest

from rs.util import progress


def test_the_time_left_counts_from_the_first_item_not_the_load_before_it(
    monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    now = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    caplog.set_level(logging.INFO, logger="rs.util.progress")
    bar = progress.LogProgress(100, "sampling")
    monkeypatch.setattr(progress, "LOG_EVERY_S", 2.0)
    for second in (600.0, 601.0, 602.0):  # the model loads for 600 s, then an item a second; lines at 600 s and 602 s
        now[0] = second
        bar.update()
    line = caplog.records[-1].getMessage()
    assert line == "sampling: 3/100 items (1.0/s, 0:10:02 so far, 0:01:37 left)", line


def test_the_terminal_bar_counts_its_rate_and_time_left_from_the_first_item_too() -> None:
    """The bar a terminal shows (tqdm) opens before the model loads: 600 s of load, then an item a second, is 1 item/s
    with 97 s left, not the 0.005 items/s and hours tqdm's own rate would say."""
    import io

    now = [0.0]
    bar = progress.Bar(total=100, desc="sampling", file=io.StringIO(), mininterval=0)
    bar._time = lambda: now[0]  # tqdm reads its clock through this attribute
    bar.start_t = bar.last_print_t = 0.0
    assert "?" in str(bar)  # no item yet: no rate, no time left
    for second in (600.0, 601.0, 602.0):
        now[0] = second
        bar.update()
    text = str(bar)
    assert "1.00it/s" in text and "10:02<01:37" in text, text
    bar.close()


def test_a_bar_without_a_total_keeps_tqdms_rate_until_its_second_item() -> None:
    """Rows counted as they are written (no total, no time left to get wrong): one row still shows a rate."""
    import io

    bar = progress.Bar(desc="writing", unit="row", file=io.StringIO(), mininterval=0)
    bar.update()
    assert "?" not in str(bar), str(bar)
    bar.close()
