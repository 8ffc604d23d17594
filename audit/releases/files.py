"""Writing the two files `python -m audit.release` reads (docs/contracts.md, "audit.release"), each
checked as `audit.releases.inputs` will read it, so a mistake shows here with the same one line:

    member = draw_membership(len(x), seed=2024)             # before making the release
    release_x, release_y = my_generator(x[member], y[member])
    write_pool("pool.npz", x, y, member=member, membership_seed=2024)
    write_release("release.npz", release_x, release_y)

Images are float on the 0-1 scale, or uint8 on 0-255 (read as uint8 / 255).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from audit.releases.inputs import check_pool_arrays, draw_membership
from audit.stats.epsilon import FAIR_COIN_RATE
from shadow_runs.atomic_files import atomic_write

__all__ = ["draw_membership", "write_pool", "write_release"]


def write_pool(
    path: str | os.PathLike,
    x: np.ndarray,
    y: np.ndarray,
    *,
    member: np.ndarray,
    membership_seed: int | None = None,
    membership_rate: float | None = None,
    x_test: np.ndarray | None = None,
    y_test: np.ndarray | None = None,
) -> Path:
    """POOL.npz: images `x` ([n, h, w] or [n, c, h, w]), labels `y`, the membership (bool [n]) and, if
    drawn by `draw_membership`, its seed and rate (so the audit can reproduce the coins and give an
    ε bound); optional `x_test`, `y_test`. ValueError (one line) if `read_inputs` would refuse it."""
    arrays = {"x": np.asarray(x), "y": np.asarray(y), "member": np.asarray(member, dtype=bool)}
    if membership_seed is not None:
        arrays["membership_seed"] = np.int64(membership_seed)
        arrays["membership_rate"] = np.float64(FAIR_COIN_RATE if membership_rate is None else membership_rate)
    elif membership_rate is not None:
        raise ValueError("membership_rate without membership_seed: record both (the coins' rate and seed) or neither")
    if (x_test is None) != (y_test is None):
        raise ValueError("x_test and y_test come together")
    if x_test is not None:
        arrays["x_test"], arrays["y_test"] = np.asarray(x_test), np.asarray(y_test)
    check_pool_arrays(arrays, Path(path))
    return _save(path, arrays)


def write_release(path: str | os.PathLike, x: np.ndarray, y: np.ndarray, *, init_idx: np.ndarray | None = None) -> Path:
    """RELEASE.npz: the released images `x` (never clipped), labels `y`, and `init_idx`, the pool rows
    of real images the release contains or started from, if any."""
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype.kind == "f":
        x = x.astype(np.float32)
    arrays = {"x": x, "y": y}
    if init_idx is not None:
        arrays["init_idx"] = np.asarray(init_idx, dtype=np.int64)
    return _save(path, arrays)


def _save(path: str | os.PathLike, arrays: dict) -> Path:
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"{path}: give a .npz path")
    atomic_write(path, lambda f: np.savez(f, **arrays))
    return path
