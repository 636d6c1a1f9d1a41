"""A run stopped (its process killed) at a chosen commit of the tables it keeps per entry,
for the tests that check such a run ends as a rebuild once run again."""

import pytest

from joulehouse import entry_sync


def stop_at_commit(monkeypatch: pytest.MonkeyPatch, stop: int | str) -> None:
    """Make the ``stop``-th ``entry_sync.Kept.write`` from now on raise ``RuntimeError``
    ("killed") instead of committing (a ``stop`` that is no number: none does);
    ``monkeypatch.undo()`` ends it."""
    commits, write = [], entry_sync.Kept.write

    def stopped(self, *args, **kwargs):
        commits.append(self.table)
        if len(commits) == stop:
            raise RuntimeError("killed")
        return write(self, *args, **kwargs)

    monkeypatch.setattr(entry_sync.Kept, "write", stopped)
