"""A block partition's failure: the entries of one partition that failed, in one error.

A block (``sensors/blocks.py``: a ClusterCockpit job-id block, a GEOPM landing day) holds
many entries; its partition fails when any of them fails, and its check names them, the
first with its file, line and field, so the UI shows which entry to fix.
"""

from joulehouse.errors import InputError

#: Entries' errors listed in one block's error.
MAX_LISTED = 50


def block_failure(key: str, errors: list[InputError], entries: int, done: int, *,
                  entry: str = "job", block: str = "block") -> InputError:
    """The error of ``block`` ``key``: its first failed ``entry`` (file, line, field), the
    others after it, and how many of its ``entries`` were ``done`` (stored, or loaded)."""
    first = errors[0]
    others = "".join(f"; and {err}" for err in errors[1:MAX_LISTED])
    more = len(errors) - MAX_LISTED
    reason = (f"{first.reason} ({len(errors)} of {entries} {entry}(s) of {block} {key} "
              f"failed, {done} done{others}{f'; and {more} more' if more > 0 else ''})")
    return InputError(first.path, reason, line=first.line, field=first.field)
