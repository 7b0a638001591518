"""The one spelling of counts, shares and errors that the cards, the audit, the commands and the logs share."""

from __future__ import annotations

from rs.util.text import counted, first_line, last_line, pct


def test_counts_and_shares_read_as_a_reader_reads_them() -> None:
    assert (
        counted(1, "shard") == "1 shard" and counted(1234, "shard") == "1,234 shards" and counted(0, "row") == "0 rows"
    )
    assert counted(2, "family", "families") == "2 families"
    assert pct(0.125) == "12.5%" and pct(1) == "100.0%" and pct(None) == "n/a"


def test_an_error_in_one_line_names_its_type_and_the_line_asked_for() -> None:
    err = RuntimeError("the task failed\n  traceback ...\nValueError: bad value")
    assert first_line(err) == "RuntimeError: the task failed"
    assert last_line(err) == "RuntimeError: ValueError: bad value"
    assert first_line(KeyError()) == "KeyError: " == last_line(KeyError())
