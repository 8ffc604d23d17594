"""The inputs of `audit.release`, read and checked (docs/contracts.md, "audit.release"), and how
recorded membership coins are drawn; bad input raises `ReleaseError`, one line naming the value."""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from audit.stats.epsilon import FAIR_COIN_RATE, bound_applies
from shadow_runs.plan import membership_row
from victims.pool import DataError, Pool

#: a float release of a uint8 pool is read on the 0-1 scale; beyond this magnitude it is taken for 0-255
MOST_UNIT_SCALE = 16.0
MEMBERSHIP_RUN = 0  # a release's recorded coins are run 0 of the plan under its membership_seed


def draw_membership(n: int, *, seed: int, rate: float = FAIR_COIN_RATE) -> np.ndarray:
    """bool [n]: members drawn by independent coins, as `audit.release` reproduces them from a pool file's
    `membership_seed` and `membership_rate`."""
    return membership_row(n, master_seed=seed, run=MEMBERSHIP_RUN, inclusion_rate=rate)


@dataclass(frozen=True)
class Coins:
    """The recorded coins of a release's membership (checked against the members)."""

    rate: float
    seed: int

    @property
    def fair(self) -> bool:
        return bound_applies(self.rate)


class ReleaseError(ValueError):
    """Bad input to `audit.release`; the message is one line naming the bad value."""


@dataclass(frozen=True, eq=False)
class ReleaseInputs:
    """The audit pool, the user's membership over it, and the release, all checked."""

    pool: Pool
    member: np.ndarray  # bool [n_pool]
    pool_index: np.ndarray  # int64 [n_pool]: row of POOL.npz's x behind each pool row
    release_x: np.ndarray  # float32 [k, c, h, w], pixel scale of pool.x
    release_y: np.ndarray  # int64 [k]
    init_idx: np.ndarray  # int64: pool rows (not file rows) of real images behind the release
    coins: Coins | None = None  # how the members were drawn, if recorded (and reproduced)

    @property
    def per_class(self) -> np.ndarray:
        return np.bincount(self.release_y, minlength=self.pool.n_classes)


# -- reading ------------------------------------------------------------------------------------
def read_npz(path: Path, what: str) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise ReleaseError(f"--{what} {path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as z:
            if not isinstance(z, np.lib.npyio.NpzFile):
                raise ValueError("not an npz archive")
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, AttributeError, TypeError) as e:
        raise ReleaseError(f"--{what} {path} is not a readable .npz file ({' '.join(str(e).split())})") from None


def _check_images(x: np.ndarray, where: str, like: tuple[int, ...] | None = None) -> None:
    """ReleaseError unless `x` is numbers [n, h, w] or [n, c, h, w]; the shape expected is named with
    `like`, the pool's image shape (c, h, w), when it is known (a release, a test split)."""
    if x.dtype.kind not in "biuf":
        raise ReleaseError(f"{where} must be numeric, got {x.dtype}")
    if x.ndim in (3, 4):
        return
    if like is None:
        raise ReleaseError(f"{where} has shape {x.shape}, not images: expected [n, h, w] or [n, c, h, w]")
    n = x.shape[0] if x.ndim else 0
    expected = f"{(n, *like)}" + (f" or {(n, *like[1:])}" if like[0] == 1 else "")
    hint = ""
    if x.ndim == 2 and x.shape[1] == int(np.prod(like)):
        hint = f"; if each row is one flattened image, x.reshape{(n, *like)}"
    raise ReleaseError(
        f"{where} has shape {x.shape}, not images: expected {expected}, the pool's image shape {like}{hint}"
    )


def _images(x: np.ndarray, where: str, like: tuple[int, ...] | None = None) -> np.ndarray:
    """[n, h, w] or [n, c, h, w] numbers -> float32 [n, c, h, w] (uint8 / 255), finite (`_check_images`)."""
    _check_images(x, where, like)
    out = np.ascontiguousarray(x[:, None] if x.ndim == 3 else x, dtype=np.float32)
    if x.dtype == np.uint8:
        out /= 255
    if not np.isfinite(out).all():
        raise ReleaseError(f"{where} has {int((~np.isfinite(out)).sum())} non-finite values")
    return out


def _labels(y: np.ndarray, n: int, where: str) -> np.ndarray:
    if y.ndim != 1 or len(y) != n:
        raise ReleaseError(f"{where} has shape {y.shape}, expected ({n},)")
    if y.dtype.kind not in "iuf" or not np.isfinite(y).all() or np.any(y != np.round(y)):
        raise ReleaseError(f"{where} must hold integer labels, got {y.dtype} values")
    return y.astype(np.int64)


def membership_of(arrays: dict, n: int, path: Path, *, flag: str = "--pool") -> np.ndarray:
    """member bool [n] from the arrays of the file `flag` names: 'member' bool [n] or 'member_idx' int [m]."""
    given = [k for k in ("member", "member_idx") if k in arrays]
    if len(given) != 1:
        raise ReleaseError(
            f"{flag} {path} needs exactly one of 'member' (bool [n]) or 'member_idx' (int [m]), "
            f"got {given or 'neither'}"
        )
    if given[0] == "member":
        member = arrays["member"]
        if member.shape != (n,):
            raise ReleaseError(f"{flag} {path}: 'member' has shape {member.shape}, expected ({n},), one per pool row")
        if member.dtype != bool and not (member.dtype.kind in "iu" and np.isin(member, (0, 1)).all()):
            raise ReleaseError(f"{flag} {path}: 'member' must be boolean (or 0/1), got {member.dtype}")
        return member.astype(bool)
    idx = arrays["member_idx"]
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        raise ReleaseError(f"{flag} {path}: 'member_idx' must be 1-d integers, got {idx.dtype} {idx.shape}")
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = idx[(idx < 0) | (idx >= n)][0]
        raise ReleaseError(f"{flag} {path}: 'member_idx' holds {int(bad)}, outside 0..{n - 1}")
    if len(np.unique(idx)) != len(idx):
        raise ReleaseError(f"{flag} {path}: 'member_idx' repeats an index")
    member = np.zeros(n, dtype=bool)
    member[idx] = True
    return member


def coins_of(arrays: dict, member: np.ndarray, path: Path, *, flag: str = "--pool") -> Coins | None:
    """The recorded coins of the file `flag` names, checked: both keys or neither, a rate in (0, 1), a
    seed >= 0, and the members exactly what those coins draw."""
    keys = ("membership_rate", "membership_seed")
    given = [k for k in keys if k in arrays]
    if not given:
        return None
    if len(given) == 1:
        other = next(k for k in keys if k not in given)
        raise ReleaseError(
            f"{flag} {path} has {given[0]!r} without {other!r}: record both (the coins' rate and seed) or neither"
        )
    rate, seed = arrays["membership_rate"], arrays["membership_seed"]
    if rate.shape != () or rate.dtype.kind not in "iuf" or not 0 < float(rate) < 1:
        raise ReleaseError(
            f"{flag} {path}: 'membership_rate' must be one number strictly between 0 and 1, got "
            f"{rate.dtype} {rate.tolist()!r}"
        )
    if seed.shape != () or seed.dtype.kind not in "iu" or int(seed) < 0:
        raise ReleaseError(
            f"{flag} {path}: 'membership_seed' must be one integer >= 0, got {seed.dtype} {seed.tolist()!r}"
        )
    coins = Coins(rate=float(rate), seed=int(seed))
    differ = int(np.sum(draw_membership(len(member), seed=coins.seed, rate=coins.rate) != member))
    if differ:
        raise ReleaseError(
            f"{flag} {path}: the members are not the coins of membership_seed {coins.seed} and "
            f"membership_rate {coins.rate:g} ({differ} of {len(member)} rows differ); record the seed "
            "and rate they were drawn with (audit.releases.inputs.draw_membership), or neither"
        )
    return coins


def read_inputs(pool_path: str | os.PathLike, release_path: str | os.PathLike) -> ReleaseInputs:
    """Read and check the two files; ReleaseError (one line naming the bad value) on bad input."""
    pool_path, release_path = Path(pool_path), Path(release_path)
    arrays = read_npz(pool_path, "pool")
    pool, member, index, coins = _read_pool(arrays, pool_path)
    return _read_release(release_path, arrays["x"].dtype, pool, member, index, coins)


def check_pool_arrays(arrays: dict, pool_path: Path) -> None:
    """ReleaseError (one line) if POOL.npz holding `arrays` would be refused (`audit.releases.files.write_pool`)."""
    _read_pool(arrays, pool_path)


def _read_pool(arrays: dict, pool_path: Path):
    """(pool, member [n], index: the file rows of the audit pool, coins) of POOL.npz's arrays."""
    from victims.pool import make_pool

    x, y, member, coins = _checked_pool_arrays(arrays, pool_path)
    n_classes = int(y.max()) + 1
    index, x_test, y_test = _test_split(arrays, x, y, member, coins, pool_path)
    try:
        pool = make_pool(
            str(pool_path),
            x[index],
            y[index],
            x_test,
            y_test,
            [str(c) for c in range(max(n_classes, int(y_test.max(initial=0)) + 1))],
            flip_ok=False,
        )
    except DataError as e:
        raise ReleaseError(f"--pool {pool_path}: {e}") from None
    return pool, member, index, coins


def _checked_pool_arrays(arrays: dict, pool_path: Path):
    """(x, y, member [n], coins) of POOL.npz's arrays, checked: images, labels 0..C-1 each present,
    members and non-members, and 'x_test' with 'y_test' or neither."""
    for key in ("x", "y"):
        if key not in arrays:
            raise ReleaseError(
                f"--pool {pool_path} has no {key!r} array (needs 'x', 'y', and 'member' or 'member_idx')"
            )
    x = _images(arrays["x"], f"--pool {pool_path}: 'x'")
    y = _labels(arrays["y"], len(x), f"--pool {pool_path}: 'y'")
    if y.size and y.min() < 0:
        raise ReleaseError(f"--pool {pool_path}: 'y' has negative label {int(y.min())}")
    member = membership_of(arrays, len(x), pool_path)
    coins = coins_of(arrays, member, pool_path)
    if member.all() or not member.any():
        raise ReleaseError(
            f"--pool {pool_path}: the membership must have members and non-members, "
            f"got {int(member.sum())} members of {len(member)}"
        )
    n_classes = int(y.max()) + 1
    if missing := sorted(set(range(n_classes)) - set(np.unique(y).tolist())):
        raise ReleaseError(
            f"--pool {pool_path}: labels in 'y' must be consecutive 0..{n_classes - 1}; missing {missing[:10]}"
        )
    if ("x_test" in arrays) != ("y_test" in arrays):
        raise ReleaseError(f"--pool {pool_path}: 'x_test' and 'y_test' must be given together")
    return x, y, member, coins


def _test_split(arrays: dict, x, y, member, coins, pool_path: Path):
    """(index: the file rows of the audit pool, x_test, y_test): the given test split; else, with
    coins, a fifth of the rows drawn without the coins, whose non-members are the test split and
    whose members leave the audit; else a fifth of the non-members."""
    from sklearn.model_selection import train_test_split

    index = np.arange(len(x))
    if "x_test" in arrays:
        x_test = _images(arrays["x_test"], f"--pool {pool_path}: 'x_test'", x.shape[1:])
        y_test = _labels(arrays["y_test"], len(x_test), f"--pool {pool_path}: 'y_test'")
        if x_test.shape[1:] != x.shape[1:]:
            raise ReleaseError(
                f"--pool {pool_path}: 'x_test' images {x_test.shape[1:]} differ from 'x' images {x.shape[1:]}"
            )
    elif coins is not None:
        # Rows drawn without looking at the coins: their non-members are the test split, their
        # members leave the audit, so which coins stay canaries does not depend on the coins.
        rows = np.arange(len(x))
        try:
            kept, held_rows = train_test_split(rows, test_size=0.2, stratify=y, random_state=0)
        except ValueError:  # a class too small to stratify
            kept, held_rows = train_test_split(rows, test_size=0.2, random_state=0)
        held = np.sort(held_rows[~member[held_rows]])
        if len(held) < 2:
            raise ReleaseError(
                f"--pool {pool_path}: {len(held)} non-member(s) in the held-out rows, too few for a "
                "test split (give 'x_test', 'y_test')"
            )
        index = np.sort(kept)
        if member[index].all() or not member[index].any():
            raise ReleaseError(
                f"--pool {pool_path}: the audit pool left after the test split needs members and "
                "non-members (give 'x_test', 'y_test')"
            )
        x_test, y_test = x[held], y[held]
    else:
        outside = np.flatnonzero(~member)
        if len(outside) < 2:
            raise ReleaseError(
                f"--pool {pool_path}: {len(outside)} non-member(s), too few to hold out a test split "
                "(give 'x_test', 'y_test')"
            )
        try:
            index, held = train_test_split(outside, test_size=0.2, stratify=y[outside], random_state=0)
        except ValueError:  # a class too small to stratify
            index, held = train_test_split(outside, test_size=0.2, random_state=0)
        index = np.sort(np.concatenate([np.flatnonzero(member), index]))
        x_test, y_test = x[np.sort(held)], y[np.sort(held)]
    return index, x_test, y_test


def _read_release(
    release_path: Path, pool_dtype: np.dtype, pool: Pool, member: np.ndarray, index: np.ndarray, coins: Coins | None
) -> ReleaseInputs:
    """RELEASE.npz read against the pool `_read_pool` made of the file's rows `index` (`member` over all rows)."""
    x_len = len(member)
    release = read_npz(release_path, "release")
    for key in ("x", "y"):
        if key not in release:
            raise ReleaseError(f"--release {release_path} has no {key!r} array (needs 'x', 'y'; optional 'init_idx')")
    where = f"--release {release_path}: 'x'"
    _check_images(release["x"], where, pool.image_shape)  # before its values are read
    if release["x"].dtype == np.uint8 and pool_dtype != np.uint8:
        raise ReleaseError(
            f"--release {release_path}: 'x' is uint8 (0-255) but the pool's 'x' is {pool_dtype}; write the release "
            "as float on the pool's scale (audit.releases.files.write_release)"
        )
    if release["x"].dtype != np.uint8 and pool_dtype == np.uint8:
        # a float release of a uint8 pool is read on the 0-1 scale (uint8 / 255), as it is: never clipped
        largest = float(np.nanmax(np.abs(release["x"]))) if release["x"].size else 0.0
        if largest > MOST_UNIT_SCALE:
            raise ReleaseError(
                f"--release {release_path}: float 'x' reaches {largest:g}, but a float release of a uint8 pool is "
                "read on the 0-1 scale (uint8 / 255); divide it by 255 (values outside [0, 1] may stay, unclipped)"
            )
    release_x = _images(release["x"], where, pool.image_shape)
    release_y = _labels(release["y"], len(release_x), f"--release {release_path}: 'y'")
    if release_x.shape[1:] != pool.image_shape:
        raise ReleaseError(
            f"--release {release_path}: images {release_x.shape[1:]} differ from the pool's {pool.image_shape}"
        )
    if len(release_x) == 0:
        raise ReleaseError(f"--release {release_path} is empty")
    if len(release_x) > x_len:
        raise ReleaseError(f"--release {release_path} has {len(release_x)} images, more than the pool's {x_len}")
    if release_y.min() < 0 or release_y.max() >= pool.n_classes:
        bad = release_y[(release_y < 0) | (release_y >= pool.n_classes)][0]
        raise ReleaseError(f"--release {release_path}: label {int(bad)} outside the pool's 0..{pool.n_classes - 1}")
    init_idx = np.zeros(0, dtype=np.int64)
    if "init_idx" in release:
        file_rows = release["init_idx"]
        if file_rows.ndim != 1 or file_rows.dtype.kind not in "iu":
            raise ReleaseError(
                f"--release {release_path}: 'init_idx' must be 1-d integers, got {file_rows.dtype} {file_rows.shape}"
            )
        not_members = file_rows[(file_rows < 0) | (file_rows >= x_len)]
        if not_members.size == 0:
            not_members = file_rows[~member[file_rows]]
        if not_members.size:
            raise ReleaseError(
                f"--release {release_path}: 'init_idx' holds {int(not_members[0])}, not a member of the pool"
            )
        file_rows = file_rows[np.isin(file_rows, index)]  # a member held out with the test split leaves the sub-group
        init_idx = np.searchsorted(index, file_rows).astype(np.int64)
    return ReleaseInputs(
        pool=pool,
        member=member[index],
        pool_index=index.astype(np.int64),
        release_x=release_x,
        release_y=release_y,
        init_idx=init_idx,
        coins=coins,
    )


def audited_pool_images(run_dir: Path, meta: Mapping) -> np.ndarray | None:
    """The audit pool's images [n, c, h, w] of an audited release again, from the POOL.npz it records,
    for `audit.report`; None for shadow runs or a file that no longer reads."""
    if not meta.get("pool_file"):
        return None
    pool_file = Path(meta["pool_file"])
    try:
        with np.load(pool_file, allow_pickle=False) as z:
            x = z["x"]
        return _images(x, str(pool_file))[np.load(run_dir / "audit" / "pool_index.npy")]
    except (OSError, ValueError, KeyError):
        return None
