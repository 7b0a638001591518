"""The command line: `rs publish|sample|families` (`rs.cli.main`) and `python -m rs.publish|sample|families`.

Nothing in the library imports this package: the commands are a layer on top. Every command runs
through `run`, the one place errors become an `error:` line, a `hint:` line and an exit status
(`run_as_program` when the command is the process's program: it also ends the process, see there).
Conventions shared by every command:

The same flag means the same thing everywhere: `--config PATH` (another families.yaml),
`--out DIR` (a local folder laid out as the Hub repos), `--cards-only`, `--dry-run`, `--limit N`,
`--ray [ADDRESS]` with `--replicas N` (the sampling stage on Ray, `rs.distributed`), `-v` / `--verbose`
(the engines' own output on the terminal instead of in the family's log file, `rs.cli.output`).
SIGTERM and Ctrl-C stop a command in order and it exits with 128 + the signal's number (143, 130),
its last line the command that resumes it; a second signal stops it at once (`rs.cli.signals`).
What a command that runs a family checks before it starts is in `rs.cli.before_run`.

This package and `rs.cli.main` import no command and nothing of the pipeline: `rs --help` and a misspelt command answer
at once, and each command imports what it runs (`rs.cli.main.COMMANDS`).
"""

from __future__ import annotations

import argparse
import atexit
import errno
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Callable, NoReturn

from rs.cli import signals
from rs.errors import RsError
from rs.util import invocation, ledger
from rs.util.long_lived import end_with_the_command


def add_config(parser: argparse.ArgumentParser, *, subcommand: bool = False) -> None:
    # on a subcommand, an absent flag must not overwrite one given before the subcommand's name
    parser.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        default=argparse.SUPPRESS if subcommand else None,
        help="families file to use instead of the project's families.yaml",
    )


def add_limit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=positive_int, metavar="N", help="only the first N images of the family")


def add_out(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", type=Path, metavar="DIR", help="publish to a local folder laid out as the Hub repos would be"
    )


def add_cards_only(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cards-only", action="store_true", help="re-render and publish the cards from the stored build, nothing else"
    )


def add_dry_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="print what would change, change nothing")


def add_build_paths(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--build-dir", type=Path, metavar="DIR", help="where builds live (default: $RS_BUILD_DIR or ./build)"
    )
    parser.add_argument(
        "--cache", type=Path, metavar="PATH", help="generation cache file (default: $RS_CACHE_DIR/generations.sqlite)"
    )


def add_verbose(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show the engines' and libraries' own output here (default: in build/FAMILY/logs/)",
    )


def remember(args: argparse.Namespace) -> None:
    """Record the path flags a command was given, for every command a hint then suggests (`rs.util.invocation`)."""
    invocation.record({flag: getattr(args, flag[2:].replace("-", "_"), None) for flag in invocation.PATHS})


def build_root(args: argparse.Namespace) -> Path:
    """The build directory: --build-dir, else $RS_BUILD_DIR, else ./build."""
    return Path(args.build_dir or os.environ.get("RS_BUILD_DIR", "build"))


def add_ray(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="answer and judge on Ray Data, one engine replica per GPU, the cache staying on this machine; "
        "--build-dir must be on storage every node mounts "
        "(ADDRESS: auto on the head node, or HEAD:6379; none: a local Ray)",
    )
    parser.add_argument(
        "--replicas",
        type=positive_int,
        metavar="N",
        help="with --ray: engine replicas (default: the cluster's GPUs / GPUs per replica)",
    )


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def positive_float(text: str) -> float:
    """A number above 0 (a rate such as tokens per second); `inf` and `nan` are not rates either."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


class RunFailed(RsError):
    """A run that stopped part-way (a Ray step's pipeline failed); what it committed stays cached."""

    default_hint = "run the same command again: it sends only what is missing"


class _CommandLineFormatter(logging.Formatter):
    """The project's own messages as the commands print them inside `output.quiet` too (`warning: ...`); others named."""

    def format(self, record: logging.LogRecord) -> str:
        if record.name == "rs" or record.name.startswith("rs."):
            return ("" if record.levelno <= logging.INFO else f"{record.levelname.lower()}: ") + record.getMessage()
        return f"{record.levelname} {record.name}: {record.getMessage()}"


def run(main: Callable[[], int | None]) -> NoReturn:
    """Run a command: an error a user can cause prints `error:` and `hint:` lines and its exit status, never a traceback."""
    sys.exit(_exit_code(main))


def run_as_program(main: Callable[[], int | None]) -> NoReturn:
    """`run(main)` as this process's program (`python -m rs.publish`, the `rs` script); the process then ends without the
    interpreter's finalization.

    A command that ended right after streaming a file through `datasets` could abort at exit ("terminate called without
    an active exception", exit -6): Arrow's reader threads were still releasing the Python buffers of the read, and a
    thread that asks for the GIL once the interpreter finalizes is ended inside C++ code (apache/arrow#34314,
    huggingface/datasets#7566). What the interpreter does before it finalizes is done here in its order: threading's
    exit hooks and the wait for non-daemon threads, the atexit handlers (logging's flush, vLLM's and Ray's shutdowns),
    the streams' flush. What only memory holds is left to the exit (`rs.util.long_lived.end_with_the_command`).
    """
    end_with_the_command()
    try:
        code = _exit_code(main)
    except SystemExit as done:  # argparse's usage errors and --help
        code = done.code if isinstance(done.code, int) or done.code is None else _said(done.code)
    except BaseException:  # a defect: its traceback, as the interpreter prints it
        sys.excepthook(*sys.exc_info())
        code = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # what Py_FinalizeEx calls first
        atexit._run_exitfuncs()
    except KeyboardInterrupt as err:  # a signal while it waits for them: the first ends the wait, a second everything
        code = 128 + getattr(err, "signum", signal.SIGINT)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed (output piped into `head`)
            pass
    os._exit(code or 0)


def _said(message: object) -> int:
    print(message, file=sys.stderr)
    return 1


def _exit_code(main: Callable[[], int | None]) -> int:
    try:
        return _run(main)
    finally:  # an argparse exit too: the next command (in this process) records its own
        invocation.reset()


def _run(main: Callable[[], int | None]) -> int:
    handler = logging.StreamHandler()
    handler.setFormatter(_CommandLineFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    signals.install()
    ledger.reset()
    invocation.begin()
    try:
        code = main()
    except RsError as err:
        if (signum := signals.received()) is not None:  # the signal reached an engine or a commit first
            code = _stopped(signum, err)
        else:
            print(f"error: {err}", file=sys.stderr)
            if err.hint:
                print(f"hint: {err.hint}", file=sys.stderr)
            code = err.exit_code
    except KeyboardInterrupt as err:
        code = _stopped(getattr(err, "signum", signal.SIGINT))
    except BrokenPipeError:  # output piped into `head`: not an error
        sys.stderr.close()
        code = 0
    except OSError as err:  # a file or folder named on the command line or in the YAML that cannot be read or written
        where = f": {err.filename}" if err.filename else ""
        print(f"error: {err.strerror or err}{where}", file=sys.stderr)
        cause = (
            "its file system is mounted read-only"
            if err.errno == errno.EROFS
            else "that path and its permissions"
            if err.errno in (errno.EACCES, errno.EPERM)
            else "that path"
        )
        print(
            f"hint: check {cause} (--config, --build-dir, --cache and --out choose where rs reads and writes)",
            file=sys.stderr,
        )
        code = 1
    # the command has said its last line: the libraries' own notices after it (torch's INFO lines at exit, after a stopped
    # run's resume command) are not its output; their warnings still are
    handler.addFilter(lambda record: record.levelno >= logging.WARNING or record.name.split(".")[0] == "rs")
    if signals.received() is not None:
        signals.leave(code)
    return code or 0


def _stopped(signum: int, trouble: RsError | None = None) -> int:
    """Say that a signal stopped the command, where, what it keeps and how to resume it; the conventional exit status."""
    name = signal.Signals(signum).name
    where = f" {doing}" if (doing := signals.during()) else " before any phase started"
    head = f"stopped by {name}{where}; "
    if trouble is not None:
        print(f"stopped by {name}{where}, and on the way out: {trouble}", file=sys.stderr)
        head = ""
    kept = ledger.kept()
    if kept:
        print(f"{head}kept (the same command goes on from there):", file=sys.stderr)
        print("".join(f"  {what}\n" for what in kept), end="", file=sys.stderr)
    else:
        print(f"{head}nothing was finished yet (the same command starts again from the beginning)", file=sys.stderr)
    print(f"to resume, run the same command again: {resume_command()}", file=sys.stderr)
    return 128 + signum


def resume_command() -> str:
    """This command line as it was typed (`python -m rs.publish ...`, or the `rs` script), ready to paste: preceded by
    the environment that chose its files and engine (`make demo` sets `HF_HUB_OFFLINE=1` and more for the command alone)."""
    as_module = (
        getattr(sys.modules.get("__main__"), "__spec__", None) is not None
    )  # `python -m rs.publish` runs rs/publish.py
    return invocation.resume(sys.orig_argv if as_module or sys.argv[0].endswith("__main__.py") else sys.argv)
