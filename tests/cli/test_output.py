"""`rs.cli.output.quiet`: what the libraries may draw on the terminal once a run's log is closed."""

from __future__ import annotations

import threading
from pathlib import Path

import datasets
import huggingface_hub.utils as hub_utils
import pytest

from rs.cli import output


def _bars_on() -> tuple[bool, bool]:
    return datasets.is_progress_bar_enabled(), not hub_utils.are_progress_bars_disabled()


def test_a_stopped_run_leaves_the_library_bars_off_while_threads_it_abandoned_still_run(tmp_path: Path) -> None:
    """An upload thread a stopped publish left behind drew its file's bar between the lines saying what the run kept."""
    datasets.enable_progress_bars()
    hub_utils.enable_progress_bars()
    release = threading.Event()
    uploading = threading.Thread(target=release.wait, name="abandoned-upload")
    uploading.start()
    try:
        with pytest.raises(KeyboardInterrupt), output.quiet(tmp_path / "logs"):
            raise KeyboardInterrupt
        assert _bars_on() == (False, False)
    finally:
        release.set()
        uploading.join()

    datasets.enable_progress_bars()
    hub_utils.enable_progress_bars()
    with pytest.raises(KeyboardInterrupt), output.quiet(tmp_path / "logs"):  # nothing left behind: as they were
        raise KeyboardInterrupt
    assert _bars_on() == (True, True)
    with output.quiet(tmp_path / "logs"):
        assert _bars_on() == (False, False)
    assert _bars_on() == (True, True)
