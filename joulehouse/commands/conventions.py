"""What every ``joulehouse`` command does the same way (docs/cli.md says why).

- :func:`add_command`: a command with a description, examples in ``--help``,
  and the options every command has (``--quiet``, ``--debug``);
  :func:`source_commands`: the ``read`` and ``energy`` groups every source adds to.
- :func:`input_path`: a path given to read must exist and hold something;
  otherwise :class:`CommandError` says what was expected there.
- :class:`Progress`: items done of total, rate and time left on standard error
  when it is a terminal (tqdm); silent otherwise and under ``--quiet``.
- :func:`write_table`: a table to standard output or a file.
- :func:`report_left_out`: what the inputs left out, on stderr, and the exit code
  (1 when nothing usable came out of them, 0 with the warnings otherwise).
- :func:`open_taudb`: a TAUdb database, read-only unless the command creates;
  every database error becomes one line naming the URL, password masked.
- :func:`run`: the exit code: 0 all good, 1 some inputs bad (reported, the
  rest written), 2 usage or environment, 70 internal error (a bug: any other
  exception, EX_SOFTWARE of sysexits.h), 130 interrupted, 141 output pipe
  closed (as a process killed by SIGPIPE: ``cat``, ``git log`` under ``head``).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Self

from tqdm import tqdm

from joulehouse.errors import InputError

if TYPE_CHECKING:  # pandas and pandera come with the command that uses them
    import pandas as pd

    from joulehouse.leftout import LeftOut
    from joulehouse.taudb.connect import TaudbDatabase

OK = 0
BAD_INPUT = 1
USAGE = 2
INTERNAL_ERROR = 70  # EX_SOFTWARE (sysexits.h): not bad input, a bug of the command
INTERRUPTED = 128 + signal.SIGINT
CLOSED_PIPE = 128 + signal.SIGPIPE

PROG = "joulehouse"


class CommandError(Exception):
    """The command cannot run as asked (usage or environment): one line, exit code 2."""


class _ExampleFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the line breaks of the description and of the examples."""


def add_command(subparsers: argparse._SubParsersAction, name: str, *, help: str,
                description: str, examples: Sequence[str],
                handler: Callable[[argparse.Namespace], int] | None = None
                ) -> argparse.ArgumentParser:
    """Add a command (or a group, without ``handler``) whose ``--help`` ends with ``examples``
    (command lines, each shown after a ``$``). A command with a handler also
    gets ``--quiet`` and ``--debug``."""
    parser = subparsers.add_parser(
        name, help=help, description=description, formatter_class=_ExampleFormatter,
        epilog="examples:\n" + "\n".join(f"  $ {line}" for line in examples))
    if handler is not None:
        parser.add_argument("-q", "--quiet", action="store_true",
                            help="no progress display on standard error")
        parser.add_argument("--debug", action="store_true",
                            help="on an error, also print the traceback")
        # a usage error found after parsing: args.command_parser.error(message) (exit 2)
        parser.set_defaults(handler=handler, command_parser=parser)
    return parser


def source_commands(subparsers: argparse._SubParsersAction, name: str, *, help: str,
                    description: str, examples: Sequence[str]) -> argparse._SubParsersAction:
    """The sub-commands of the group ``name`` (``read``, ``energy``: one per source), the
    group made on first use; a source's module adds its ``<name> <source>`` command there
    whichever module made the group."""
    group = subparsers.choices.get(name)
    if group is None:
        group = add_command(subparsers, name, help=help, description=description,
                            examples=examples)
        return group.add_subparsers(dest="source", required=True)
    return next(action for action in group._actions
                if isinstance(action, argparse._SubParsersAction))


def timezone_name(name: str) -> str:
    """``name`` if it is an IANA time zone (an argparse ``type=``: otherwise a usage error)."""
    try:
        from joulehouse.timeutil import check_timezone

        return check_timezone(name)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def input_path(path: Path, expected: str, *, folder: bool | None = None) -> Path:
    """``path`` if it exists and holds something: a non-empty file, or a folder with a
    visible entry; ``folder`` True or False also requires that kind.

    Otherwise a :class:`CommandError` naming ``path``, what is wrong, and
    ``expected`` (what should be there).
    """
    if not path.exists():
        problem = "no such file or folder"
    elif folder is True and not path.is_dir():
        problem = "not a folder"
    elif folder is False and path.is_dir():
        problem = "a folder, not a file"
    elif path.is_dir() and not any(not entry.name.startswith(".") for entry in path.iterdir()):
        problem = "empty folder"
    elif path.is_file() and path.stat().st_size == 0:
        problem = "empty file"
    else:
        return path
    raise CommandError(f"{path}: {problem}; expected {expected}")


class Progress:
    """``with Progress(items, unit=..., quiet=...) as shown: for item in shown: ...``

    Items done of total, rate and time left on stderr when it is a terminal and
    not ``quiet``; erased at the end. :meth:`report` and :meth:`print` write
    lines without breaking the display.
    """

    def __init__(self, items: Sequence, *, unit: str, quiet: bool):
        shown = not quiet and sys.stderr.isatty()
        self._bar = tqdm(items, total=len(items), unit=unit, file=sys.stderr,
                         disable=not shown, dynamic_ncols=True, leave=False)

    def __iter__(self) -> Iterator:
        return iter(self._bar)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self._bar.close()

    def report(self, message: str) -> None:
        """``joulehouse: message`` on standard error (a skipped or bad item)."""
        self._bar.write(f"{PROG}: {message}", file=sys.stderr)

    def print(self, line: str) -> None:
        """``line`` on standard output (a result as it comes)."""
        self._bar.write(line, file=sys.stdout)


def something_read(read: int, failed: int, unit: str) -> None:
    """A :class:`CommandError` when every one of ``failed`` items (``unit``s) failed and
    none was ``read``: nothing is written (an output file given is left untouched)."""
    if failed and not read:
        raise CommandError(f"no {unit} could be read ({failed} reported above); nothing written")


def report_left_out(left_out: Sequence[LeftOut], rows: int, failed: int) -> int:
    """Print each record of ``left_out`` on stderr (``joulehouse: <input>: left out <part>:
    <reason>``) and return the exit code of a command that wrote ``rows`` rows and found
    ``failed`` bad inputs (each reported already): ``BAD_INPUT`` when an input was bad, or
    when something was left out and no row came out ("nothing usable": an empty table with
    exit 0 would pass for a result); ``OK`` otherwise, the records being warnings."""
    for record in left_out:
        print(f"{PROG}: {record}", file=sys.stderr)
    return BAD_INPUT if failed or (left_out and not rows) else OK


def write_table(table: pd.DataFrame, fmt: str, out: Path | None) -> None:
    """``table`` as ``fmt`` (``csv`` or ``parquet``) to the file ``out``, or to standard
    output. Parquet is not written to a terminal; a file that cannot be written
    is a :class:`CommandError`."""
    if out is None:
        if fmt == "parquet" and sys.stdout.isatty():
            raise CommandError("Parquet is binary, not for a terminal: give --out FILE "
                               "or redirect the output")
        _write(table, fmt, sys.stdout.buffer if fmt == "parquet" else sys.stdout)
        return
    try:
        with open(out, "wb") as file:
            _write(table, fmt, file)
    except OSError as err:
        raise CommandError(f"{out}: cannot write: {err.strerror or err}") from err


def _write(table: pd.DataFrame, fmt: str, file) -> None:
    if fmt == "parquet":
        table.to_parquet(file, index=False)
    else:
        table.to_csv(file, index=False)


@contextmanager
def open_taudb(url: str, schema: str | None, *, create: bool) -> Iterator[TaudbDatabase]:
    """The TAUdb database at ``url``, closed at the end.

    Without ``create`` it is opened read-only and must already hold the TAUdb
    schema; with it, a missing SQLite file is created (the schema is the
    command's business). Every database error, at opening or later, is a
    :class:`CommandError` of one line naming the URL, its password masked.
    """
    # Imported here: SQLAlchemy and the drivers are for the TAUdb commands only, and a
    # command line imports only its own command's modules (joulehouse/cli.py).
    from joulehouse.taudb.connect import (
        DRIVER_ERRORS,
        TaudbDatabase,
        TaudbUnavailable,
        unavailable,
    )
    from joulehouse.taudb.schema import require_schema

    try:
        try:
            db = TaudbDatabase(url, schema, read_only=not create)
        except (ValueError, OSError) as err:
            raise TaudbUnavailable(url, str(err)) from err
        with db:
            if not create:
                require_schema(db)
            yield db
    except TaudbUnavailable as err:
        raise CommandError(str(err)) from err
    except DRIVER_ERRORS as err:
        raise CommandError(str(unavailable(url, err))) from err


def run(args: argparse.Namespace) -> int:
    """Run ``args.handler`` and turn its outcome into the exit code.

    Errors are one line on stderr (``joulehouse: ...``), with the traceback
    only under ``--debug``. When standard output is a closed pipe the command
    stops quietly: what is left to write goes to /dev/null.
    """
    try:
        code = args.handler(args) or OK
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return CLOSED_PIPE
    except KeyboardInterrupt:
        return _fail(args, "interrupted", INTERRUPTED)
    except CommandError as err:
        return _fail(args, str(err), USAGE)
    except InputError as err:
        return _fail(args, str(err), BAD_INPUT)
    except Exception as err:  # noqa: BLE001 -- a bug: one line, not bad input's exit code
        return _fail(args, f"internal error: {type(err).__name__}: {err} (a bug: --debug shows "
                     "the traceback)", INTERNAL_ERROR)


def _fail(args: argparse.Namespace, message: str, code: int) -> int:
    if args.debug:
        traceback.print_exc()
    print(f"{PROG}: {message}", file=sys.stderr)
    return code
