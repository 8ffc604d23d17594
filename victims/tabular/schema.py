"""A table's public schema: its columns, their public domains (categories, or bounds and bins), and
the label of the downstream task: what a custodian publishes before any record is released.
Nothing in it is read from the private rows, and a record outside it is refused, never clipped.
A table is held as a `victims.pool.Pool`: `x` float32 [n, d] of the features in schema order (a
category as its index, a number as it is), `y` the label's index; `codes` maps it to the
discrete domain the marginal mechanisms count on, `from_codes` back."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from victims.pool import DataError

KINDS = ("categorical", "integer", "continuous")


@dataclass(frozen=True)
class Column:
    """One column of the public schema."""

    name: str
    kind: str  # one of KINDS
    categories: tuple = ()  # categorical: its public values, as the file spells them (str or number)
    lower: float | None = None  # integer / continuous: the public bounds, inclusive
    upper: float | None = None
    bins: int = 0  # integer / continuous: equal-width bins over [lower, upper] for discrete mechanisms

    def __post_init__(self) -> None:
        object.__setattr__(self, "categories", tuple(self.categories))
        where = f"schema column {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise DataError(f"schema column name {self.name!r} must be a non-empty string")
        if self.kind not in KINDS:
            raise DataError(f"{where}: kind {self.kind!r} is none of {', '.join(KINDS)}")
        if self.kind == "categorical":
            if len(self.categories) < 2 or len(set(self.categories)) != len(self.categories):
                raise DataError(f"{where}: categories must be 2 or more distinct values, got {list(self.categories)}")
            return
        for bound in (self.lower, self.upper):
            if not isinstance(bound, (int, float)) or not math.isfinite(bound):
                raise DataError(f"{where}: bounds must be finite numbers, got lower={self.lower} upper={self.upper}")
        if not self.lower < self.upper:
            raise DataError(f"{where}: lower {self.lower} must be below upper {self.upper}")
        if not isinstance(self.bins, int) or self.bins < 1:
            raise DataError(f"{where}: bins must be a positive integer, got {self.bins!r}")
        if self.kind == "integer" and len(np.unique(self.to_codes(self._integers()))) < self.bins:
            raise DataError(
                f"{where}: {self.bins} bins over [{self.lower}, {self.upper}] leave a bin without an integer"
            )

    @property
    def size(self) -> int:
        """Cells of this column's discrete domain: its categories, or its bins."""
        return len(self.categories) if self.kind == "categorical" else self.bins

    def encode(self, values: np.ndarray, *, where: str) -> np.ndarray:
        """float64 [n]: a categorical value's category index, a number as it is. DataError (one line
        naming the column and the first bad value) for a value outside the public domain."""
        values = np.asarray(values, dtype=object)
        if self.kind == "categorical":
            return self._category_indices(values, where=where).astype(np.float64)
        try:
            numbers = values.astype(np.float64)
        except (TypeError, ValueError):
            bad = next(v for v in values if not _is_number(v))
            raise DataError(f"{where}: column {self.name!r} holds {bad!r}, not a number") from None
        outside = ~((numbers >= self.lower) & (numbers <= self.upper))  # NaN is outside too
        if self.kind == "integer":
            outside |= numbers != np.round(numbers)
        if outside.any():
            bad = float(numbers[outside][0])
            kind = "an integer " if self.kind == "integer" else ""
            raise DataError(
                f"{where}: column {self.name!r} holds {bad!r}, outside its public domain "
                f"({kind}in [{self.lower}, {self.upper}])"
            )
        return numbers

    def _category_indices(self, values: np.ndarray, *, where: str) -> np.ndarray:
        lookup = {_category_key(c): i for i, c in enumerate(self.categories)}
        try:  # each distinct value's key once, a value known by its type too (True == 1, but is text)
            index = {tv: lookup.get(_category_key(tv[1]), -1) for tv in {(type(v), v) for v in values}}
            found = np.array([index[(type(v), v)] for v in values], dtype=np.int64)
        except TypeError:  # an unhashable value: every value's key in turn
            found = np.array([lookup.get(_category_key(v), -1) for v in values], dtype=np.int64)
        if (found < 0).any():
            bad = values[found < 0][0]
            raise DataError(
                f"{where}: column {self.name!r} holds {bad!r}, outside its public categories {list(self.categories)}"
            )
        return found

    def to_codes(self, encoded: np.ndarray) -> np.ndarray:
        """int64 [n]: the cell of each encoded value (a category's index, or its bin)."""
        if self.kind == "categorical":
            return np.asarray(encoded, dtype=np.int64)
        width = (self.upper - self.lower) / self.bins
        return np.clip(np.floor((np.asarray(encoded) - self.lower) / width), 0, self.bins - 1).astype(np.int64)

    def from_codes(self, codes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """float64 [n]: a value in each cell: the category's index, or a number drawn uniformly in the
        bin (rounded for an integer column, kept inside the bounds)."""
        codes = np.asarray(codes, dtype=np.int64)
        if self.kind == "categorical":
            return codes.astype(np.float64)
        if self.kind == "integer":  # an integer drawn uniformly among those of the cell
            integers = self._integers()
            cells = self.to_codes(integers)
            first = np.searchsorted(cells, codes, side="left")
            count = np.searchsorted(cells, codes, side="right") - first
            return integers[first + (rng.random(len(codes)) * count).astype(np.int64)]
        width = (self.upper - self.lower) / self.bins
        return np.clip(self.lower + (codes + rng.random(len(codes))) * width, self.lower, self.upper)

    def _integers(self) -> np.ndarray:
        return np.arange(math.ceil(self.lower), math.floor(self.upper) + 1, dtype=np.float64)

    def decode(self, encoded: np.ndarray) -> list:
        """The file's values of encoded values (the inverse of `encode`)."""
        if self.kind == "categorical":
            return [self.categories[int(i)] for i in encoded]
        if self.kind == "integer":
            return [int(v) for v in encoded]
        return [float(v) for v in encoded]

    def to_json(self) -> dict:
        found: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.kind == "categorical":
            found["categories"] = list(self.categories)
        else:
            found.update(lower=self.lower, upper=self.upper, bins=self.bins)
        return found


@dataclass(frozen=True)
class Schema:
    """The public schema of a table: every column (the label among them) and the label's name."""

    columns: tuple[Column, ...]
    label: str
    features: tuple[Column, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", tuple(self.columns))
        names = [c.name for c in self.columns]
        if duplicated := sorted({n for n in names if names.count(n) > 1}):
            raise DataError(f"schema column {duplicated[0]!r} is named twice")
        if self.label not in names:
            raise DataError(f"schema label {self.label!r} is none of its columns ({', '.join(names)})")
        if self.label_column.kind != "categorical":
            raise DataError(f"schema label {self.label!r} must be categorical, got {self.label_column.kind}")
        object.__setattr__(self, "features", tuple(c for c in self.columns if c.name != self.label))
        if not self.features:
            raise DataError("the schema needs a column beside its label")

    @property
    def label_column(self) -> Column:
        return next(c for c in self.columns if c.name == self.label)

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(str(c) for c in self.label_column.categories)

    @property
    def domain_sizes(self) -> tuple[int, ...]:
        """Cells of each discrete column: the features in order, the label last (`codes`)."""
        return (*(c.size for c in self.features), self.label_column.size)

    @property
    def categorical(self) -> np.ndarray:
        """bool [d]: which feature columns are categorical."""
        return np.array([c.kind == "categorical" for c in self.features])

    def encode(self, frame, *, where: str) -> tuple[np.ndarray, np.ndarray]:
        """(x float32 [n, d], y int64 [n]) of a pandas DataFrame with the schema's columns (others
        are refused, so that nothing unnamed rides along). DataError naming the column or value."""
        present = [str(c) for c in frame.columns]
        if missing := [c.name for c in self.columns if c.name not in present]:
            what = "label column" if missing[0] == self.label else "column"
            raise DataError(f"{where}: no {what} {missing[0]!r} (the schema's columns: {', '.join(self.names)})")
        if extra := [c for c in present if c not in self.names]:
            raise DataError(f"{where}: column {extra[0]!r} is not in the schema ({', '.join(self.names)})")
        if len(frame) == 0:
            raise DataError(f"{where}: no rows")
        x = np.stack([c.encode(frame[c.name].to_numpy(), where=where) for c in self.features], axis=1)
        y = self.label_column.encode(frame[self.label].to_numpy(), where=where).astype(np.int64)
        return x.astype(np.float32), y

    def decode(self, x: np.ndarray, y: np.ndarray):
        """The pandas DataFrame (columns in schema order) of encoded rows."""
        import pandas as pd

        values = {c.name: c.decode(x[:, j]) for j, c in enumerate(self.features)}
        values[self.label] = self.label_column.decode(y)
        return pd.DataFrame({name: values[name] for name in self.names})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def codes(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """int64 [n, d + 1]: each row's cell in every feature column, then its label."""
        x = np.asarray(x).reshape(len(x), len(self.features))
        found = [c.to_codes(x[:, j]) for j, c in enumerate(self.features)]
        return np.stack([*found, np.asarray(y, dtype=np.int64)], axis=1)

    def from_codes(self, codes: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(x float32 [n, d], y int64 [n]) of rows given by their cells (`codes`' inverse; a number
        drawn uniformly in its bin)."""
        codes = np.asarray(codes, dtype=np.int64)
        x = np.stack([c.from_codes(codes[:, j], rng) for j, c in enumerate(self.features)], axis=1)
        return x.astype(np.float32), codes[:, -1].copy()

    def check_rows(self, x: np.ndarray, y: np.ndarray, *, where: str) -> None:
        """DataError naming the first column of encoded rows `x` [n, d], `y` [n] that leaves the schema."""
        if x.ndim != 2 or x.shape[1] != len(self.features):
            raise DataError(f"{where}: rows must be [n, {len(self.features)}] (the schema's features), got {x.shape}")
        for j, c in enumerate(self.features):
            values = x[:, j].astype(np.float64)
            if c.kind == "categorical":
                bad = (values != np.round(values)) | (values < 0) | (values >= c.size)
            else:
                bad = ~((values >= c.lower) & (values <= c.upper))
            if bad.any():
                raise DataError(f"{where}: column {c.name!r} holds {float(values[bad][0])!r}, outside the schema")
        if len(y) and (np.min(y) < 0 or np.max(y) >= self.label_column.size):
            raise DataError(f"{where}: label {self.label!r} holds a code outside its {self.label_column.size} classes")

    def to_json(self) -> dict:
        return {"label": self.label, "columns": [c.to_json() for c in self.columns]}

    @classmethod
    def from_json(cls, found: Any, *, where: str) -> Schema:
        """The schema of a parsed JSON object {"label", "columns": [{"name", "kind", ...}]}."""
        if not isinstance(found, dict) or not isinstance(found.get("columns"), list) or "label" not in found:
            raise DataError(f"{where}: a schema is an object with 'label' and a list of 'columns'")
        columns = []
        for entry in found["columns"]:
            if not isinstance(entry, dict) or not {"name", "kind"} <= set(entry):
                raise DataError(f"{where}: schema column {entry!r} needs a 'name' and a 'kind'")
            unknown = set(entry) - {"name", "kind", "categories", "lower", "upper", "bins"}
            if unknown:
                raise DataError(f"{where}: schema column {entry['name']!r} has unknown key {sorted(unknown)[0]!r}")
            columns.append(Column(**entry))
        return cls(columns=tuple(columns), label=found["label"])

    def fingerprint_bytes(self) -> bytes:
        """The schema's canonical JSON: part of a tabular pool's fingerprint."""
        return json.dumps(self.to_json(), sort_keys=True).encode()


def cell_counts(codes: np.ndarray, sizes: tuple[int, ...], columns: tuple[int, ...]) -> np.ndarray:
    """float64 table of shape (sizes[c] for c in columns): how many rows of `codes` (`Schema.codes`)
    fall in each cell of the marginal over `columns`."""
    shape = tuple(sizes[c] for c in columns)
    cells = np.ravel_multi_index(np.asarray(codes, dtype=np.int64)[:, list(columns)].T, shape)
    return np.bincount(cells, minlength=int(np.prod(shape))).reshape(shape).astype(np.float64)


def whitebox_observations(
    noisy: list[np.ndarray],
    codes: np.ndarray,
    sizes: tuple[int, ...],
    marginals: tuple[tuple[int, ...], ...],
    canary_codes: np.ndarray,
    canary_in: np.ndarray,
) -> np.ndarray:
    """float32 [k, canaries]: marginal m's noisy count in canary j's cell less the other members in it
    (a cell that does not exist reads 0). N(b_j, sigma^2) for the correct mechanism."""
    out = np.zeros((len(marginals), len(canary_codes)), dtype=np.float64)
    for m, columns in enumerate(marginals):
        cells = tuple(canary_codes[:, c] for c in columns)
        others = cell_counts(codes, sizes, columns)[cells] - canary_in
        out[m] = np.nan_to_num(noisy[m][cells], nan=0.0) - others
    return out.astype(np.float32)


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _category_key(value: Any) -> Any:
    """A category's lookup key: a number by its value (3, 3.0 and "3" from a CSV are one category), else its text."""
    if isinstance(value, (bool, np.bool_)):
        return ("text", str(value))
    if _is_number(value) and math.isfinite(float(value)):
        return ("number", round(float(value), 9))
    return ("text", str(value).strip())
