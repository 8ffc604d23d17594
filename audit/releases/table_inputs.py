"""The inputs of `audit.release` for a table: the pool a tabular dataset (`--dataset`), the membership over its rows a
file of its own (`--members`: .npz with POOL.npz's membership keys, or .csv / .parquet with one column `member` or
`member_idx`), the release a CSV or Parquet file of the schema's columns (`--release`). docs/contracts.md,
"audit.release"; bad input raises ReleaseError or DataError, one line naming the value."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from audit.releases.inputs import ReleaseError, ReleaseInputs, coins_of, membership_of, read_npz
from victims import load_pool
from victims.tabular.pools import read_table

TABLE_SUFFIXES = (".csv", ".parquet")


def read_table_inputs(dataset: str, members_path: str | os.PathLike, release_path: str | os.PathLike) -> ReleaseInputs:
    """Read and check the tabular pool, the membership and the release (module docstring)."""
    pool = load_pool(dataset)
    if not pool.tabular:
        raise ReleaseError(f"--dataset {dataset} holds images: give them as --pool POOL.npz (without --members)")
    members_path, release_path = Path(members_path), Path(release_path)
    member, coins = read_members(members_path, pool.n_pool)
    if member.all() or not member.any():
        raise ReleaseError(
            f"--members {members_path}: the membership must have members and non-members, "
            f"got {int(member.sum())} members of {len(member)}"
        )
    if release_path.suffix.lower() not in TABLE_SUFFIXES:
        raise ReleaseError(f"--release {release_path}: a table's release is a .csv or .parquet file")
    where = f"--release {release_path}"
    x, y = pool.schema.encode(read_table(release_path, where=where), where=where)
    if len(x) > pool.n_pool:
        raise ReleaseError(f"{where} has {len(x)} rows, more than the pool's {pool.n_pool}")
    return ReleaseInputs(
        pool=pool,
        member=member,
        pool_index=np.arange(pool.n_pool, dtype=np.int64),
        release_x=x,
        release_y=y,
        init_idx=np.zeros(0, dtype=np.int64),
        coins=coins,
    )


def read_members(path: Path, n: int):
    """(member bool [n], coins or None) of a --members file (module docstring)."""
    if path.suffix.lower() == ".npz":
        arrays = read_npz(path, "members")
    elif path.suffix.lower() in TABLE_SUFFIXES:
        frame = read_table(path, where=f"--members {path}")
        columns = [str(c) for c in frame.columns]
        if len(columns) != 1 or columns[0] not in ("member", "member_idx"):
            raise ReleaseError(f"--members {path}: needs one column, 'member' or 'member_idx', got {columns}")
        values = frame[columns[0]].to_numpy()
        if values.dtype == object:  # "true" / "false" as a CSV spells them
            found = {str(v).strip().lower() for v in values}
            if not found <= {"true", "false"}:
                bad = sorted(found - {"true", "false"})[0]
                raise ReleaseError(f"--members {path}: '{columns[0]}' holds {bad!r}, not 0/1 or true/false")
            values = np.array([str(v).strip().lower() == "true" for v in values])
        arrays = {columns[0]: values}
    else:
        raise ReleaseError(f"--members {path}: give a .npz, .csv or .parquet file")
    member = membership_of(arrays, n, path, flag="--members")
    return member, coins_of(arrays, member, path, flag="--members")
