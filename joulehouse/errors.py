"""Errors about bad input, each naming the file and the place in it."""

from __future__ import annotations

from os import PathLike


class InputError(ValueError):
    """Input that cannot be read as its format says.

    The message always names the file, and the line (1-based, counting the
    header) and/or the field when they are known, e.g.
    ``data/0/gpu-power.csv:42: power: negative value -12.0``.
    """

    def __init__(
        self,
        path: str | PathLike[str],
        message: str,
        *,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        self.reason = message
        where = self.path if line is None else f"{self.path}:{line}"
        what = f"{field}: {message}" if field else message
        super().__init__(f"{where}: {what}")

    def __reduce__(self):
        # Pickled with its own arguments, so that an error raised in a worker
        # process or on a Dask worker comes back whole (file, line, field).
        return _rebuild, (type(self), self.path, self.reason, self.line, self.field)


class IncompleteInputError(InputError):
    """Input that is still being written (e.g. no ``experiment_end`` yet).

    Callers wait for it rather than fail it.
    """


def _rebuild(cls: type[InputError], path: str, message: str, line: int | None,
             field: str | None) -> InputError:
    """An InputError (or subclass) from what ``InputError.__reduce__`` pickled."""
    return cls(path, message, line=line, field=field)
