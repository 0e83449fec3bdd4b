"""The keys Muster signs its records with, read from a directory (a mounted Secret).

Every regular file in the directory whose name does not start with ``.`` is a key: its
name the key's id, its bytes the secret (at least 16).  Muster believes a record any of
them verifies (:mod:`extender.core.records`) and signs with the key whose name sorts last
among the *settled* ones: those present when the process started, or seen for
``settle_seconds`` since.  A key added to the Secret reaches each replica's and the
evictor's copy only when its kubelet syncs it (up to about a minute apart), so a new key
only verifies at first: no replica signs with it before the others can check it.  A key
is rotated by adding a file with a later name, then, once no record signed with the old
key remains, removing the old file.  The directory is read again when its modification
time changes (the kubelet swaps a Secret volume's files in one rename), at most once per
``recheck_seconds``.

With no directory, a process makes a random key of its own: nobody else believes its
records, so use it only for one replica that may lose its in-flight state on restart.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path

from extender.core.records import RecordKeys

log = logging.getLogger(__name__)

#: The shortest secret accepted: 128 bits.
MIN_KEY_BYTES = 16
#: How long a key added while Muster runs only verifies before Muster signs with it: longer
#: than the kubelet takes to bring a Secret's change to every pod that mounts it.
SETTLE_SECONDS = 180.0


class RecordKeyError(ValueError):
    """A key directory Muster cannot sign with; the message names the file."""


def read_key_directory(directory: Path) -> RecordKeys:
    """The keys in ``directory`` (raises :class:`RecordKeyError`)."""
    try:
        entries = sorted(directory.iterdir())
    except OSError as error:
        raise RecordKeyError(f"{directory}: {error.strerror or error}") from None
    found = []
    for path in entries:
        if path.name.startswith(".") or not path.is_file():
            continue
        secret = path.read_bytes().strip()
        if len(secret) < MIN_KEY_BYTES:
            raise RecordKeyError(f"{path}: a record key needs at least {MIN_KEY_BYTES} bytes")
        found.append((path.name, secret))
    if not found:
        raise RecordKeyError(f"{directory}: no key files (each file is one key)")
    return RecordKeys(tuple(found))


class KeyDirectory:
    """The current keys of a directory, re-read when it changes."""

    def __init__(
        self,
        directory: Path,
        *,
        recheck_seconds: float = 5.0,
        settle_seconds: float = SETTLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.recheck_seconds = recheck_seconds
        self.settle_seconds = settle_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._stamp = self._mtime()
        self._read = read_key_directory(directory)
        self._checked = clock()
        #: When each key was first seen; those present at start count as settled.
        self._first_seen = {key_id: -math.inf for key_id, _ in self._read.keys}
        self._current = self._read

    def _mtime(self) -> int:
        try:
            return os.stat(self.directory).st_mtime_ns
        except OSError:
            return -1

    def __call__(self) -> RecordKeys:
        """The keys now, signing with the last settled one (the last good reading if the
        directory became unreadable)."""
        now = self.clock()
        with self._lock:
            if now - self._checked >= self.recheck_seconds:
                self._checked = now
                stamp = self._mtime()
                if stamp != self._stamp:
                    try:
                        self._read = read_key_directory(self.directory)
                        self._stamp = stamp
                        log.info("record keys re-read from %s", self.directory)
                    except RecordKeyError as error:
                        log.warning("record keys: keeping the last good ones: %s", error)
                    for key_id, _ in self._read.keys:
                        self._first_seen.setdefault(key_id, now)
            settled = [
                key_id
                for key_id, _ in self._read.keys
                if now - self._first_seen[key_id] >= self.settle_seconds
            ]
            # With none settled (every key new), the last verifies and signs: nothing else can.
            signer = settled[-1] if settled else self._read.keys[-1][0]
            if self._current.keys != self._read.keys or self._current.signer != signer:
                self._current = RecordKeys(self._read.keys, signer)
            return self._current


def record_keys_source(directory: str | None) -> Callable[[], RecordKeys]:
    """The keys of ``directory`` (raises :class:`RecordKeyError`), or, without one, a
    random key of this process alone (logged as a warning)."""
    if directory is not None:
        return KeyDirectory(Path(directory))
    log.warning(
        "no --records-key-dir: Muster's records are signed with a key of this process "
        "alone; another replica, or this one restarted, will not believe them"
    )
    keys = RecordKeys((("ephemeral", secrets.token_bytes(32)),))
    return lambda: keys
