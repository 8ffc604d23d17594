"""Rows and records of the pool (torch-free): which of the plan's coins each row follows. A record
is what one coin decides: a natural example (record i is row i) or a canary, one row or a
duplicate's K rows, after the natural ones. `record_of_row` is what the plan draws coins by;
`CanaryColumns` says which columns of an audit's arrays are which. Nothing here imports the victims."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np


class CanaryLayout(Protocol):
    """How many canary records there are (`n`) and how many rows each has (`rows_per_record`)."""

    @property
    def n(self) -> int: ...

    @property
    def rows_per_record(self) -> int: ...


class _Layout(NamedTuple):
    n: int
    rows_per_record: int


def record_of_row(n_natural: int, config: CanaryLayout | None) -> np.ndarray:
    """int64 [n_natural + n_rows] (n_rows = config.n * config.rows_per_record): the record of every
    row (natural row i is record i; the K rows of a duplicate canary share its record)."""
    natural = np.arange(n_natural, dtype=np.int64)
    if config is None or config.n == 0:
        return natural
    canaries = n_natural + np.repeat(np.arange(config.n, dtype=np.int64), config.rows_per_record)
    return np.concatenate([natural, canaries])


def canary_rows(n_natural: int, config: CanaryLayout | None) -> np.ndarray:
    """bool [n_natural + n_rows] (n_rows = config.n * config.rows_per_record): True on the canary rows."""
    n_rows = 0 if config is None else config.n * config.rows_per_record
    return np.concatenate([np.zeros(n_natural, dtype=bool), np.ones(n_rows, dtype=bool)])


def first_rows(record: np.ndarray) -> np.ndarray:
    """bool [n]: True on the first row of each record (the row a record is scored on)."""
    record = np.asarray(record)
    first = np.zeros(record.shape, dtype=bool)
    first[np.unique(record, return_index=True)[1]] = True
    return first


@dataclass(frozen=True, eq=False)
class CanaryColumns:
    """Which columns of a [T, n_rows] array of an audit with canaries are which: the one place the
    summary, the figures, the report and the CLI's checks take their canary groups from."""

    canary: np.ndarray  # bool [n_rows]: the canary rows
    record: np.ndarray  # int64 [n_rows]: the record of each row

    @classmethod
    def of(cls, n_natural: int, config: CanaryLayout) -> CanaryColumns:
        return cls(canary=canary_rows(n_natural, config), record=record_of_row(n_natural, config))

    @classmethod
    def from_entry(cls, entry: dict | None) -> CanaryColumns | None:
        """From the `canaries` entry of experiment.json (or summary.json's evaluation); None without one."""
        if not entry:
            return None
        rows_per_record = entry["copies"] if entry["kind"] == "duplicate" else 1
        return cls.of(entry["n_natural"], _Layout(n=int(entry["n"]), rows_per_record=int(rows_per_record)))

    @property
    def scored(self) -> np.ndarray:
        """bool [n_rows]: one column per canary record, its first row (a duplicate's other copies count nowhere)."""
        return self.canary & first_rows(self.record)

    @property
    def natural(self) -> np.ndarray:
        return ~self.canary

    @property
    def single_rows(self) -> bool:
        """Whether every canary record is one row (not so for duplicates, whose one coin moves several)."""
        return bool((np.bincount(self.record)[self.record[self.canary]] == 1).all())

    def coins_scored(self, membership: np.ndarray, scores: np.ndarray | None = None) -> tuple[int, int]:
        """(IN, OUT) canary coins of membership [T, n_rows] on the scored columns (`scores` not NaN, if given)."""
        member = membership[:, self.scored]
        seen = np.ones(member.shape, dtype=bool) if scores is None else ~np.isnan(scores[:, self.scored])
        return int((seen & member).sum()), int((seen & ~member).sum())
