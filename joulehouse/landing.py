"""Landing folders: files or folders that appear side by side, and when they are complete.

Every source whose data lands as entries of a folder (TAU profile sets,
GEOPM reports, PowerAPI report files) uses this module; what counts as an
entry is the source's ``identify`` function (entry path -> the files that
make it up, or None when it is not one of the source's entries).

An entry is *complete* once none of its files (nor its folders, nor links
among them) changed for a quiet period, by their ctimes: every write, copy,
rename or link sets a ctime, so an entry copied with its old mtimes still
waits, and one given an mtime in the future does not wait for it. Its
*fingerprint* is a digest of its files' names, sizes and mtimes (ns); it
changes when a file is added, removed or rewritten, and reads no content. An
entry whose ctime moves past its folder's watermark is handed out again, even
when only its ctime moved (``chmod``, ``chown``: one idempotent re-run, the
known cost of a cursor that stays small; :func:`scan_landings`).
Listing a landing folder costs one ``stat`` per file; a sensor's cursor
(:class:`LandingState`) keeps a ctime watermark per folder, so a file
unchanged behind it (not growing, on the folder's device) is not looked into
again. A folder that cannot be listed (missing, unreadable, an empty mount point)
is left out of the tick, named, with its part of the cursor kept; so is a
folder one of whose entries cannot be read (permissions, a dangling link), the
entry named (:func:`list_landings`).

An entry that keeps growing (a report stream) is never quiet; a source may
hand it out anyway once its files grew by ``grown_bytes`` since it was last
handed out, or once it has waited ``grown_wait_s`` since it was first seen
changed (:func:`scan_landings`), and read only what is new (the source's
business: see ``joulehouse/powerapi/stream.py``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISLNK, S_ISREG

from joulehouse.digest import file_stats_digest

Identify = Callable[[Path], "list[Path] | None"]
"""Entry path -> the files and folders that make up the entry (itself included), or None."""


@dataclass(frozen=True)
class LandedItem:
    """One entry of a landing folder; ``key`` is ``<landing name>/<entry name>``;
    ``last_change`` in seconds since the epoch: the latest ctime of its files and
    folders and of the links among them (every write, copy, rename or link sets it to the
    file server's clock; an mtime can be set to any time: ``cp -p``, ``touch -d``, a
    writer's clock ahead); ``size``: bytes of its files together; ``foreign``: some of
    its files (links followed) are on another device than the landing folder, whose
    times come from another server's clock (compared by fingerprint only, see
    :class:`LandingState`); ``mtime``: the latest mtime of its files (seconds since the
    epoch, links followed; 0 when it has none): when its writer last wrote it, as far as
    the writer's clock and ``cp -p`` say (``joulehouse.landing_days``; completeness
    goes by ``last_change``)."""

    key: str
    path: Path
    fingerprint: str
    last_change: float
    size: int = 0
    foreign: bool = False
    mtime: float = 0.0

    @property
    def landing(self) -> str:
        """The name of the landing folder the entry is in."""
        return landing_of(self.key)

    def is_quiet(self, quiet_s: float, now: float) -> bool:
        """True when nothing in the entry changed for ``quiet_s`` seconds before ``now``."""
        return now - self.last_change >= quiet_s


def landing_of(key: str) -> str:
    """The landing folder's name in an entry's ``key`` (``<landing name>/<entry name>``)."""
    return key.rpartition("/")[0]


class StillLanded:
    """Whether an entry key's entry is still in its configured landing folder (``folders``:
    name -> path; ``key in still``): what a source's tables are kept in line with. An entry
    removed from its folder, or of a folder no longer configured, is not; a folder that
    cannot be listed, or lists nothing at all while entries of it are stored (an NFS mount
    point not mounted is such an empty folder), keeps every entry of it. Each folder is
    listed once, when first asked about."""

    def __init__(self, folders: Mapping[str, os.PathLike[str] | str]) -> None:
        self.folders = folders
        self._names: dict[str, set[str] | None] = {}  # landing -> its entries; None: all kept

    def __contains__(self, key: object) -> bool:
        landing = landing_of(str(key))
        if landing not in self._names:
            try:
                listed = (set(os.listdir(self.folders[landing])) if landing in self.folders
                          else set())
            except OSError:
                listed = None
            self._names[landing] = None if landing in self.folders and not listed else listed
        present = self._names[landing]
        return present is None or str(key).rpartition("/")[2] in present


def still_landed(keys: Sequence[str], folders: Mapping[str, os.PathLike[str] | str]
                 ) -> list[str]:
    """The entry ``keys`` whose entry is still in its configured landing folder, in order
    (:class:`StillLanded`): what a run without partitions brings a source's tables in line
    with. One listing per landing folder."""
    still = StillLanded(folders)
    return [key for key in keys if key in still]


def _stat(path: Path) -> tuple[os.stat_result, float]:
    """``path``'s stat (links followed) and its ctime, that of the link itself included (a
    new link to an old file changed the entry)."""
    own = path.lstat()
    if not S_ISLNK(own.st_mode):
        return own, own.st_ctime
    target = path.stat()
    return target, max(own.st_ctime, target.st_ctime)


def read_landed_item(path: Path, key: str, identify: Identify,
                     device: int | None = None) -> LandedItem | None:
    """The entry at ``path`` with its fingerprint, or None when ``identify`` rejects it;
    ``device``: the landing folder's ``st_dev`` (default: that of ``path``'s folder)."""
    files = identify(path)
    if files is None:
        return None
    device = os.stat(path.parent).st_dev if device is None else device
    stats = [(file, *_stat(file)) for file in sorted(set(files))]
    last_change = max((changed for _, _, changed in stats), default=0.0)
    digest = file_stats_digest((file.relative_to(path.parent).as_posix(), stat)
                               for file, stat, _ in stats if S_ISREG(stat.st_mode))
    size = sum(stat.st_size for _, stat, _ in stats if S_ISREG(stat.st_mode))
    foreign = any(stat.st_dev != device for _, stat, _ in stats)
    mtime = max((stat.st_mtime for _, stat, _ in stats if S_ISREG(stat.st_mode)), default=0.0)
    return LandedItem(key, path, digest, last_change, size, foreign, mtime)


def find_landed(landing: str | os.PathLike[str], name: str, identify: Identify,
                since: float | None = None, watch: Container[str] = ()) -> list[LandedItem]:
    """Every entry directly in the folder ``landing`` (named ``name``) that ``identify``
    accepts, by key. Hidden entries (``.name``) are skipped, and with ``since`` (seconds
    since the epoch: the folder's watermark in :class:`LandingState`) so are plain files
    whose ctime is before it, on one ``stat`` and without ``identify`` (a file entry is
    made of itself alone, and handed out already), unless their key is in ``watch`` or
    they are on another device. A folder is always looked into: its own times do not
    change when a file below it is rewritten.

    An entry gone since the folder was listed is left out. One that cannot be read (an
    ``OSError`` from ``identify`` or a ``stat``: a folder of another user's, mode 0700),
    or that holds a dangling link, raises :class:`UnreadableEntry` naming it and why."""
    items = []
    device = os.stat(landing).st_dev
    with os.scandir(landing) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            key = f"{name}/{entry.name}"
            if entry.name.startswith(".") or (
                    since is not None and key not in watch
                    and _file_before(entry, since, device)):
                continue
            try:
                found = read_landed_item(Path(entry.path), key, identify, device)
            except FileNotFoundError as err:
                if err.filename is None or not os.path.islink(err.filename):
                    continue  # gone since listed (moved away): left out
                raise UnreadableEntry(f"entry {key!r} ({entry.path}) holds a dangling link "
                                      f"{os.fspath(err.filename)}") from err
            except OSError as err:
                raise UnreadableEntry(f"entry {key!r} ({entry.path}) cannot be read "
                                      f"({err.strerror or err}{_at(err, entry.path)})") from err
            if found is not None:
                items.append(found)
    return items


def _at(err: OSError, path: os.PathLike[str] | str) -> str:
    """`` at <file>`` naming the file of ``err`` where it is not ``path``, else ''."""
    if err.filename is None or os.fspath(err.filename) == os.fspath(path):
        return ""
    return f" at {os.fspath(err.filename)}"


class UnreadableEntry(OSError):
    """An entry of a landing folder cannot be read now (the message names it and why): its
    whole folder is left out of the tick (:func:`list_landings`)."""


@dataclass(frozen=True)
class Listing:
    """The entries of the landing folders listed this tick, and the folders not listed, by
    name, with why (``unlisted``: their cursor is kept as it was, see
    :func:`scan_landings`)."""

    items: list[LandedItem]
    unlisted: dict[str, str]
    devices: dict[str, int] = field(default_factory=dict)  # of the folders listed: st_dev


def list_landings(folders: Mapping[str, os.PathLike[str] | str], state: LandingState,
                  identify: Identify) -> Listing:
    """Every entry of the landing ``folders`` (name -> path) as :func:`find_landed` finds it
    with ``state``'s watermark of each. A folder that cannot be listed (missing, not a
    folder, unreadable, or one of its entries unreadable or holding a dangling link, the
    entry named: a partial listing would forget that entry's fingerprint, or move the
    watermark past it) or that is an empty mount point (the file system not mounted: it
    lists no entry where ``state`` saw some, and its device is not the one
    ``state.devices`` saw it on; one a cursor written before devices were kept does not
    name is taken as empty) is left out, named with why, and the others are listed: an
    NFS mount briefly absent, or an entry unreadable for a while, must not fail the tick,
    nor, once back, hand out again what was handed out before nor lose what was not. A folder emptied on its own device (reports archived away) is
    just empty (``Listing.devices``: each listed folder's device, for the cursor)."""
    items: list[LandedItem] = []
    unlisted: dict[str, str] = {}
    devices: dict[str, int] = {}
    for name, folder in folders.items():
        try:
            found = find_landed(folder, name, identify, state.since.get(name), state.sizes)
            device = _device(folder)
            empty = (not found and name in state.newest and not _has_entry(folder)
                     and device != state.devices.get(name, device))
        except UnreadableEntry as err:
            unlisted[name] = (f"landing folder {name!r} ({folder}) not listed: {err}; its "
                              "cursor is kept")
            continue
        except OSError as err:
            unlisted[name] = (f"landing folder {name!r} ({folder}) cannot be listed "
                              f"({err.strerror or err}{_at(err, folder)}); its cursor is kept")
            continue
        if empty:
            unlisted[name] = (f"landing folder {name!r} ({folder}) lists no entry where "
                              "entries were seen before, on another device (a file system "
                              "not mounted?)")
            continue
        items += found
        devices[name] = device
    return Listing(items, unlisted, devices)


def _device(folder: os.PathLike[str] | str) -> int:
    """The ``st_dev`` of ``folder``: a mount point's changes when it is unmounted."""
    return os.stat(folder).st_dev


def _has_entry(folder: os.PathLike[str] | str) -> bool:
    """Whether ``folder`` holds an entry that is not hidden."""
    with os.scandir(folder) as entries:
        return any(not entry.name.startswith(".") for entry in entries)


def _file_before(entry: os.DirEntry, since: float, device: int) -> bool:
    """Whether ``entry`` is a regular file on ``device`` (links followed) whose ctime, and
    that of the link if it is one, are before ``since``."""
    try:
        stat, ctime = _stat(Path(entry.path))
    except OSError:  # gone, or a dangling link: identify decides
        return False
    return S_ISREG(stat.st_mode) and stat.st_dev == device and ctime < since


@dataclass(frozen=True)
class LandingState:
    """What a landing sensor remembers between ticks (its cursor), small whatever the size
    of its folders. Per landing folder (by name; ``folders``: its path, the watermark
    starting afresh when the name points elsewhere): every entry whose ctime is before
    ``since[name]`` (seconds since the epoch) was handed out, and ``newest[name]`` is the
    latest ctime of an entry seen there, at most the time of the tick that saw it.
    ``seen``: key -> fingerprint of the entries handed out whose ctime is at or after
    their folder's ``since``, and of every foreign one (on another device: its times
    come from another clock); ``sizes``: key -> size (bytes) when handed out, of the
    entries handed out while still changing (growing streams), until they are quiet.
    ``devices``: name -> the folder's ``st_dev`` when last listed (a mount point's
    changes when its file system is not mounted: :func:`list_landings`). ``pending``: key
    -> when a tick first saw the entry changed and left it waiting (seconds since the
    epoch), kept only for a source with ``grown_wait_s``, for at most :data:`PENDING_MAX`
    entries (:func:`scan_landings`).

    The watermark compares ctimes, which every write, copy or link sets to the file
    server's clock and no tool sets back (as :mod:`joulehouse.treescan` uses them). An
    entry whose ctime is at or before ``newest[name]`` existed when the next tick listed
    the folder, so that tick compared it; ``since[name]`` therefore follows the last
    tick's ``newest[name]`` less :data:`CLOCK_MARGIN_S`, held back by the folder's oldest
    entry still waiting. The margin covers what a stat may show late (an NFS client
    caches attributes up to 60 s: ``acregmax``) and a server's clock stepping back; each
    folder has its own, as it may be on a server with its own clock. The cursor so holds
    the entries that changed in the last :data:`CLOCK_MARGIN_S` before the newest change
    of each folder: a few at the rates reports land, more right after a burst."""

    since: dict[str, float] = field(default_factory=dict)
    seen: dict[str, str] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    newest: dict[str, float] = field(default_factory=dict)
    folders: dict[str, str] = field(default_factory=dict)
    devices: dict[str, int] = field(default_factory=dict)
    pending: dict[str, float] = field(default_factory=dict)

    def handed_out(self, item: LandedItem) -> bool:
        """Whether ``item``, as it is now, was handed out already."""
        since = self.since.get(item.landing)
        return ((since is not None and not item.foreign and item.last_change < since)
                or self.seen.get(item.key) == item.fingerprint)

    def over(self, folders: Mapping[str, os.PathLike[str] | str]) -> LandingState:
        """This state for the landing ``folders`` (name -> path) configured now: a folder's
        watermark, fingerprints and sizes are forgotten when its name is no longer
        configured or points at another path (what was handed out there says nothing of
        the folder there now)."""
        paths = {name: str(path) for name, path in folders.items()}
        kept = {name for name, path in paths.items() if self.folders.get(name) == path}
        ours = {name for name in paths if name not in self.folders} | kept  # new ones too
        return LandingState(
            {name: at for name, at in self.since.items() if name in kept},
            {key: f for key, f in self.seen.items() if landing_of(key) in ours},
            {key: n for key, n in self.sizes.items() if landing_of(key) in ours},
            {name: at for name, at in self.newest.items() if name in kept}, paths,
            {name: dev for name, dev in self.devices.items() if name in kept},
            {key: at for key, at in self.pending.items() if landing_of(key) in ours})

    def to_json(self) -> str:
        return json.dumps({"since": self.since, "seen": self.seen, "sizes": self.sizes,
                           "newest": self.newest, "folders": self.folders,
                           "devices": self.devices, "pending": self.pending},
                          sort_keys=True)

    @classmethod
    def from_json(cls, cursor: str | None) -> LandingState:
        """The state in ``cursor`` (:meth:`to_json`). A cursor written before watermarks
        were kept holds every entry handed out (``seen``; or key -> fingerprint alone):
        still right, it shrinks after the next ticks. Its ``sizes`` (of every entry ever
        handed out) are left: a growing stream is handed out once more. One written before
        devices (or ``pending``) were kept has none (see :func:`list_landings`): its waiting
        entries' waits start again."""
        state = json.loads(cursor or "{}")
        if not isinstance(state.get("seen"), dict):
            return cls(seen=state)
        if "since" not in state:
            return cls(seen=state["seen"])
        return cls(state["since"], state["seen"], state["sizes"], state["newest"],
                   state["folders"], state.get("devices", {}), state.get("pending", {}))


#: The most entries whose wait for ``grown_wait_s`` a cursor keeps (:func:`scan_landings`),
#: so that a burst of new files does not grow it by one key each.
PENDING_MAX = 1000
#: How far behind a folder's newest change its watermark stays (s): stats shown late
#: (NFS attribute caches, 60 s by default) and a server's clock stepping back.
CLOCK_MARGIN_S = 120.0


@dataclass(frozen=True)
class LandingScan:
    """Entries to process now (new or changed since they were handed out, and quiet), how
    many wait (``deferred`` of them ready but over the cap), and the next state."""

    ready: list[LandedItem]
    waiting: int
    state: LandingState
    deferred: int = 0


def scan_landings(items: Iterable[LandedItem], state: LandingState, quiet_s: float,
                  now: float, *, grown_bytes: int | None = None,
                  grown_wait_s: float | None = None, cap: int | None = None,
                  unlisted: Collection[str] = (),
                  devices: Mapping[str, int] | None = None) -> LandingScan:
    """Compare the present ``items`` with what ``state`` says was handed out before.

    An entry not handed out as it is now (new or changed) is ready once quiet, or, with
    ``grown_bytes``, once its size is that many bytes above its size when last handed out
    (``state.sizes``; 0 when not known), or, with ``grown_wait_s``, once that many seconds
    have passed since a tick first saw it changed and not handed out (``state.pending``,
    kept for at most :data:`PENDING_MAX` entries waiting, those waiting longest; a burst's
    others wait for their quiet period or ``grown_bytes``): a stream that is never quiet
    is handed out as it grows, each byte within ``grown_wait_s`` and two ticks of its
    writing. Until then it waits. With ``cap``, at most that many are ready (those changed
    least recently; in the order given), the others wait (``deferred``) as if not ready
    yet. ``items`` may leave out entries changed before their folder's ``state.since``
    but not those in ``state.sizes`` (see :func:`find_landed`). The folders named in
    ``unlisted`` were not listed this tick (:func:`list_landings`): their watermark,
    fingerprints and sizes are kept as they were. ``devices`` (name -> ``st_dev`` of the
    folders listed: ``Listing.devices``) update the state's.

    An entry is compared with the cursor alone: once its folder's watermark passed it, its
    fingerprint is forgotten, and an entry whose ctime moves past the watermark again is
    handed out again, even when only its ctime moved (``chmod``, ``chown``, a hard link
    added): one idempotent re-run of its partition, the known cost. So a failed entry fixed
    in place keeping size and mtimes (``cp -p``) is handed out again too, with its
    fingerprint unchanged (for the run key that follows, see
    ``sensors/partition_runs.retry_request``).
    """
    present = list(items)
    changed = [found for found in present if not state.handed_out(found)]

    def grown(found: LandedItem) -> bool:
        return ((grown_bytes is not None
                 and found.size - state.sizes.get(found.key, 0) >= grown_bytes)
                or (grown_wait_s is not None
                    and now - state.pending.get(found.key, now) >= grown_wait_s))

    eligible = sorted((found for found in changed if found.is_quiet(quiet_s, now) or grown(found)),
                      key=lambda found: (found.last_change, found.key))
    chosen = {found.key for found in eligible[:cap]}
    ready = [found for found in present if found.key in chosen]  # in the order given
    waiting = [found for found in changed if found.key not in chosen]
    since, newest = dict(state.since), dict(state.newest)
    for name, last in state.newest.items():
        if name in unlisted:
            continue
        held = [found.last_change for found in waiting if found.landing == name]
        since[name] = max(min([last - CLOCK_MARGIN_S, *held]), state.since.get(name, -math.inf))
    for found in present:
        if not found.foreign:  # at most now: a clock ahead does not carry the watermark
            newest[found.landing] = max(min(found.last_change, now),
                                        newest.get(found.landing, -math.inf))
    seen = {found.key: found.fingerprint for found in present
            if (found.key in chosen or state.handed_out(found)) and (
                found.foreign or found.last_change >= since.get(found.landing, -math.inf))}
    sizes = {found.key: (found.size if found.key in chosen else state.sizes[found.key])
             for found in present if not found.is_quiet(quiet_s, now) and (
                 found.key in chosen or found.key in state.sizes)}
    longest = sorted(waiting, key=lambda found: (state.pending.get(found.key, now),
                                                 found.last_change, found.key))
    pending = ({} if grown_wait_s is None else
               {found.key: state.pending.get(found.key, now) for found in longest[:PENDING_MAX]})
    seen |= {key: f for key, f in state.seen.items() if landing_of(key) in unlisted}
    sizes |= {key: n for key, n in state.sizes.items() if landing_of(key) in unlisted}
    pending |= {key: at for key, at in state.pending.items() if landing_of(key) in unlisted}
    return LandingScan(ready, len(waiting),
                       LandingState(since, seen, sizes, newest, dict(state.folders),
                                    {**state.devices, **(devices or {})}, pending),
                       len(eligible) - len(ready))
