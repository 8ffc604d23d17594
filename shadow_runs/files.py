"""Atomic file writes (torch-free): every file of the run store and of an audit's outputs is
written to a temporary name beside it, flushed to disk and renamed into place, so a file that
exists is complete."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np


def atomic_write(path: Path, write) -> None:
    """Call `write(file_object)` on a temporary file beside `path`, then rename it onto `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data) -> None:
    atomic_write(path, lambda f: f.write((json.dumps(data, indent=2, sort_keys=False) + "\n").encode()))


def write_npy(path: Path, array: np.ndarray) -> None:
    atomic_write(path, lambda f: np.save(f, array))
