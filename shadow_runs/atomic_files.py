"""Atomic file writes (torch-free): every file of the run store and of an audit's outputs is written to a temporary name
beside it, flushed to disk and renamed into place, so a file that exists is complete."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np


def _umask() -> int:
    """The process's umask, read from /proc/self/status without changing it; only where /proc does not
    say, by os.umask(0) and back (which is briefly 0 for every thread)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0)
    os.umask(old)
    return old


def atomic_write(path: Path, write) -> None:
    """Call `write(file_object)` on a temporary file beside `path`, then rename it onto `path`, with the
    mode `open(path, "w")` would give it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            fd_or_path = f.fileno() if os.chmod in os.supports_fd else tmp
            os.chmod(fd_or_path, 0o666 & ~_umask())  # before the rename: the file appears with its mode
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data) -> None:
    atomic_write(path, lambda f: f.write((json.dumps(data, indent=2, sort_keys=False) + "\n").encode()))


def write_npy(path: Path, array: np.ndarray) -> None:
    atomic_write(path, lambda f: np.save(f, array))
