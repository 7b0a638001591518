"""What a command shows: the project's own messages, a progress bar per stage and the summary.

Engines and libraries write a great deal (vLLM and transformers notices, PyTorch's C++ warnings
written straight to file descriptor 2, Python warnings): in `quiet` all of it goes to a log file
in the family's build folder, `build/<FAMILY>/logs/`, and the terminal keeps the messages of the
`rs` loggers, the progress bars (`rs.util.progress`) and what the command prints on stdout. A command
that fails says where its log is and shows the log's last lines. `-v` / `--verbose` keeps
everything on the terminal, as the libraries would have it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import time
import traceback
from collections import deque
from pathlib import Path
from typing import Iterator, TextIO

from tqdm.auto import tqdm

from rs.cli import signals
from rs.errors import RsError
from rs.util import progress
from rs.util.locks import BuildBusy, PublishBusy

LOG_TAIL_LINES = 15
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _TerminalHandler(logging.Handler):
    """The project's own log records, written so that they do not break a progress bar being drawn."""

    def __init__(self, stream: TextIO):
        super().__init__(logging.INFO)
        self.stream = stream
        self.addFilter(lambda record: record.name == "rs" or record.name.startswith("rs."))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
            prefix = "" if record.levelno <= logging.INFO else f"{record.levelname.lower()}: "
            tqdm.write(prefix + message, file=self.stream)
        except Exception:
            self.handleError(record)


@contextlib.contextmanager
def quiet(log_dir: Path, *, verbose: bool = False) -> Iterator[Path | None]:
    """Send engine and library output to a new log file under `log_dir` for the duration; yields its path.

    With `verbose`, nothing is redirected (yields None).
    """
    _release_engine_loggers()
    if verbose:
        yield None
        return
    created = [folder for folder in (log_dir, *log_dir.parents) if not folder.exists()]  # deepest first
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")  # vLLM's loggers then propagate to the root logger: the file
    sys.stdout.flush()
    sys.stderr.flush()
    log = open(path, "a", buffering=1, encoding="utf-8", errors="replace")
    saved_fd = os.dup(2)
    terminal = os.fdopen(os.dup(saved_fd), "w", buffering=1, encoding="utf-8", errors="replace")
    os.dup2(log.fileno(), 2)  # C and C++ code writing to stderr, and Python's sys.stderr, now write to the log
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    file_handler = logging.StreamHandler(log)
    file_handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root.handlers = [file_handler, _TerminalHandler(terminal)]
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    progress.terminal = terminal
    bars = _library_bars(enabled=False)
    refused = stopped = False
    try:
        yield path
    except (BuildBusy, PublishBusy):
        refused = (
            True  # another run holds the build or the target: this one wrote nothing, not even a log in its folder
        )
        raise
    except BaseException as err:
        stopped = isinstance(err, KeyboardInterrupt)
        if stopped:  # where the run was when it was stopped, for whoever wonders what it was doing
            log.write(f"{err or 'interrupted'}, in:\n" + "".join(traceback.format_exception(err)))
            log.flush()
        elif not isinstance(err, SystemExit):
            engines_say = isinstance(err, RsError) and err.show_log
            if engines_say:  # the engine's own last lines, before this traceback joins them
                _tell_where_the_log_is(path, terminal, tail=True, cause=True)
            log.write("".join(traceback.format_exception(err)))
            log.flush()
            if not engines_say and not (
                isinstance(err, RsError) and err.exit_code == 2
            ):  # a usage error is its own account
                _tell_where_the_log_is(
                    path, terminal, tail=not isinstance(err, (RsError, OSError))
                )  # an OSError says its path
        raise
    finally:
        progress.terminal = None
        # a stopped run's abandoned uploads (rs.hub.publish) must not draw their bars over its account
        if not (stopped and signals.abandoned_threads()):
            _library_bars(enabled=bars)
        logging.captureWarnings(False)
        root.handlers, root.level = saved_handlers, saved_level
        _engines_keep_logging_to(path)
        sys.stderr.flush()
        os.dup2(saved_fd, 2)
        os.close(saved_fd)
        terminal.close()
        log.close()
        if refused:
            path.unlink(missing_ok=True)
            for folder in created:  # the folders made for the log, if nothing else came into them meanwhile
                try:
                    folder.rmdir()
                except OSError:
                    break


ENGINE_LOGGERS = ("vllm", "ray")
_late_handler: logging.Handler | None = None


def _engines_keep_logging_to(path: Path) -> None:
    """Engines shut down after the command (at exit): what they say then goes to the same log."""
    global _late_handler
    _release_engine_loggers()
    _late_handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    _late_handler.setFormatter(logging.Formatter(LOG_FORMAT))
    for name in ENGINE_LOGGERS:
        logging.getLogger(name).addHandler(_late_handler)
        logging.getLogger(name).propagate = False


def _release_engine_loggers() -> None:
    global _late_handler
    if _late_handler is None:
        return
    for name in ENGINE_LOGGERS:
        logging.getLogger(name).removeHandler(_late_handler)
        logging.getLogger(name).propagate = True
    _late_handler.close()
    _late_handler = None


def _tell_where_the_log_is(path: Path, terminal: TextIO, *, tail: bool, cause: bool = False) -> None:
    terminal.write(f"log: {path}\n")
    last: deque[str] = deque()
    if tail:
        with open(path, encoding="utf-8", errors="replace") as fh:
            last = deque(fh, maxlen=LOG_TAIL_LINES)
        terminal.write(f"its last {len(last)} lines:\n" + "".join(f"  | {line}" for line in last))
    if cause and (first := _first_exception(path)) is not None and not any(first in line for line in last):
        terminal.write(f'the first error in the log (where the engine\'s "root cause above" points):\n  | {first}\n')
    terminal.flush()


_EXCEPTION_LINE = re.compile(r"^(?:\(\w+ pid=\d+\) )?((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception): \S.*)$")
_ENGINE_START = "rs.engines.vllm: Loading "
"""The log line `VLLMEngine` writes as it starts loading a model."""


def _first_exception(path: Path) -> str | None:
    """The first `SomeError: message` line since the engine last started loading (else in the whole log): an engine
    process that fails to start logs its reason there, and the errors raised after it only point back at it."""
    first = None
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if _ENGINE_START in line:
                first = None  # what went before belongs to something else
            elif first is None and (match := _EXCEPTION_LINE.match(line.rstrip("\n"))):
                first = match.group(1)[:1000]
    return first


def _library_bars(*, enabled: bool) -> bool:
    """Turn the `datasets` and `huggingface_hub` progress bars on or off (the stages draw their own); were they on?"""
    import datasets
    import huggingface_hub.utils as hub_utils

    were = datasets.is_progress_bar_enabled()
    for on, off in (
        (datasets.enable_progress_bars, datasets.disable_progress_bars),
        (hub_utils.enable_progress_bars, hub_utils.disable_progress_bars),
    ):
        (on if enabled else off)()
    return were


class _NotThirdParty(logging.Filter):
    """Lets through rs's own records, and any library's errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name == "rs" or record.name.startswith("rs.") or record.levelno >= logging.ERROR


@contextlib.contextmanager
def own_lines_only() -> Iterator[None]:
    """For a command that writes no log (`rs families validate`): libraries' notices below an error are not its output.

    Importing vLLM to ask it about the sampling settings logs its Triton and platform notices (INFO and WARNING); on the
    terminal they read as problems of the families file.
    """
    keep = _NotThirdParty()
    handlers = logging.getLogger().handlers[:]
    for handler in handlers:
        handler.addFilter(keep)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(keep)
