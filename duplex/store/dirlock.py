"""One owner per embedded data dir: an exclusive ``flock`` held for the process's life.

The kernel drops the lock when its holder dies, SIGKILL included, so a crashed
gateway never leaves a stale lock and its data dir can be reused at once. The
lock file also names the holder's pid, for the refusal a second process gets.
The descriptor is not inherited (Python opens it close-on-exec), so a server
the holder started does not keep the dir locked after its owner is gone.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from duplex.errors import StoreUnavailable


class DataDirInUse(StoreUnavailable):
    """Another live process holds the data dir."""

    default_code = "data_dir_in_use"

    def __init__(self, data_dir: Path, holder: int | None) -> None:
        who = f"pid {holder}" if holder is not None else "another process"
        super().__init__(f"{data_dir} is in use by {who}")
        self.data_dir = data_dir
        self.holder = holder


class DirLock:
    """``<dir>/lock``, held exclusively from ``acquire()`` to ``release()``."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / "lock"
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock at once or raise ``DataDirInUse`` (never waits)."""
        if self._fd is not None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise DataDirInUse(self.directory, holder) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor drops the flock


def _holder(fd: int) -> int | None:
    """The pid the holder wrote; None while it has not written it yet."""
    try:
        return int(os.pread(fd, 32, 0).decode().strip())
    except (OSError, ValueError):
        return None
