"""Tabular pools: `fair` and `randhie` (statsmodels' tables), the worst-case pair `pair-3bin`, and a
table of your own described by a schema file. Each loads into a `victims.pool.Pool` with its public
`schema` (never read from the rows; a value outside it is refused) and a held-out test split.

- `fair`: Fair's 1974 survey of married women; a record is a person. Pool 5,000, test 1,366.
- `randhie`: the RAND Health Insurance Experiment. **A record is a person-year**: a person's
  history is up to 5 records, protected only at group privacy. Pool 16,000, test 4,190.
- `pair-3bin`: dpmm's worst-case neighbour pair (Ganev, Annamalai & Kulynych, TPDP 2026): D is ten
  records [0, 0, 0], target [1, 1, 1]; the test split is the domain's 8 cells.
- A schema file: JSON with "label", "columns", "data" (.csv or .parquet, relative to it) and
  optionally "test" (else 20% held out, stratified, seed 0)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from victims.pool import DataError, Pool, make_pool, train_test_split
from victims.tabular.schema import Column, Schema


def _categorical(name: str, categories) -> Column:
    return Column(name, "categorical", categories=tuple(categories))


#: Fair's survey: the questionnaire's answer codes (age and years married are class midpoints)
FAIR_SCHEMA = Schema(
    columns=(
        _categorical("rate_marriage", (1, 2, 3, 4, 5)),
        _categorical("age", (17.5, 22, 27, 32, 37, 42)),
        _categorical("yrs_married", (0.5, 2.5, 6, 9, 13, 16.5, 23)),
        _categorical("children", (0, 1, 2, 3, 4, 5.5)),
        _categorical("religious", (1, 2, 3, 4)),
        _categorical("educ", (9, 12, 14, 16, 17, 20)),
        _categorical("occupation", (1, 2, 3, 4, 5, 6)),
        _categorical("occupation_husb", (1, 2, 3, 4, 5, 6)),
        Column("affairs", "continuous", lower=0.0, upper=60.0, bins=12),
    ),
    label="rate_marriage",
)
FAIR_TEST = 1366

#: the RAND experiment: its five coinsurance plans (log(1 + rate)), indicator columns, round bounds
RANDHIE_SCHEMA = Schema(
    columns=(
        Column("mdvis", "integer", lower=0, upper=80, bins=16),
        _categorical("lncoins", (0.0, 3.258096, 3.931826, 4.564348, 4.61512)),
        _categorical("idp", (0, 1)),
        Column("lpi", "continuous", lower=0.0, upper=8.0, bins=8),
        Column("fmde", "continuous", lower=0.0, upper=9.0, bins=9),
        Column("physlm", "continuous", lower=0.0, upper=1.0, bins=5),
        Column("disea", "continuous", lower=0.0, upper=60.0, bins=12),
        _categorical("hlthg", (0, 1)),
        _categorical("hlthf", (0, 1)),
        _categorical("hlthp", (0, 1)),
    ),
    label="hlthg",
)
RANDHIE_TEST = 4190

#: the dpmm audit's pair: three binary columns, the last the label (module docstring)
PAIR_3BIN_SCHEMA = Schema(columns=tuple(_categorical(name, (0, 1)) for name in "abc"), label="c")
PAIR_3BIN_SIZE = 10
#: the target record of each built-in pair (`--canary-kind record`'s default `--target-record`)
PAIR_TARGETS = {"pair-3bin": "a=1,b=1,c=1"}

#: how to get the package the embedded tables are read from (a dependency in pyproject.toml)
TABULAR_INSTALL = "pip install -e ."


def _statsmodels_table(name: str):
    try:
        from statsmodels import datasets
    except ImportError:
        raise DataError(f"dataset {name} needs statsmodels, which ships it: {TABULAR_INSTALL}") from None
    return getattr(datasets, name).load_pandas().data


def _split_pool(name: str, schema: Schema, frame, *, test_size, where: str) -> Pool:
    x, y = schema.encode(frame, where=where)
    try:
        x, x_test, y, y_test = train_test_split(x, y, test_size=test_size, stratify=y, random_state=0)
    except ValueError:  # a class too small to stratify
        x, x_test, y, y_test = train_test_split(x, y, test_size=test_size, random_state=0)
    return make_pool(name, x, y, x_test, y_test, schema.classes, flip_ok=False, schema=schema)


def load_fair(*, data_root=None, download=False) -> Pool:
    """Fair's survey, embedded in statsmodels (module docstring)."""
    return _split_pool("fair", FAIR_SCHEMA, _statsmodels_table("fair"), test_size=FAIR_TEST, where="fair")


def load_randhie(*, data_root=None, download=False) -> Pool:
    """The RAND Health Insurance Experiment's person-years, embedded in statsmodels (module docstring)."""
    frame = _statsmodels_table("randhie")
    return _split_pool("randhie", RANDHIE_SCHEMA, frame, test_size=RANDHIE_TEST, where="randhie")


def load_pair_3bin(*, data_root=None, download=False) -> Pool:
    """D of the dpmm audit's pair: ten records [0, 0, 0]; the test split the domain's 8 cells (module docstring)."""
    x, y = np.zeros((PAIR_3BIN_SIZE, 2), dtype=np.float32), np.zeros(PAIR_3BIN_SIZE, dtype=np.int64)
    cells = np.array([[(i >> 2) & 1, (i >> 1) & 1, i & 1] for i in range(8)])
    x_test, y_test = cells[:, :2].astype(np.float32), cells[:, 2].astype(np.int64)
    return make_pool(
        "pair-3bin", x, y, x_test, y_test, PAIR_3BIN_SCHEMA.classes, flip_ok=False, schema=PAIR_3BIN_SCHEMA
    )


def read_table(path: str | os.PathLike, *, where: str):
    """A pandas DataFrame of a .csv or .parquet file; DataError naming the file if it cannot be read."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{where}: table file not found: {path}")
    try:
        if path.suffix.lower() == ".parquet":
            return pd.read_parquet(path)
        if path.suffix.lower() == ".csv":
            return pd.read_csv(path)
    except Exception as e:  # pandas raises many kinds on a bad file; name the file in one line
        raise DataError(f"{where}: cannot read {path} ({type(e).__name__}: {str(e).strip().splitlines()[0]})") from None
    raise DataError(f"{where}: {path} is neither .csv nor .parquet")


def load_schema_file(path: str | os.PathLike) -> Pool:
    """The table a schema file describes (module docstring); DataError (one line naming the value)
    for a bad schema, a missing or unreadable file, a missing column or a value outside the schema."""
    path = Path(path)
    where = os.fspath(path)
    if not path.is_file():
        raise DataError(f"schema file not found: {path}")
    try:
        found = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{where} is not a JSON schema file ({e})") from None
    if not isinstance(found, dict) or not isinstance(found.get("data"), str):
        raise DataError(f"{where}: a schema file names its rows' file under 'data'")
    extra = set(found) - {"label", "columns", "data", "test"}
    if extra:
        raise DataError(f"{where}: unknown key {sorted(extra)[0]!r} (known: label, columns, data, test)")
    schema = Schema.from_json({k: found[k] for k in ("label", "columns") if k in found}, where=where)
    frame = read_table(path.parent / found["data"], where=where)
    if "test" not in found:
        return _split_pool(where, schema, frame, test_size=0.2, where=f"{where} ({found['data']})")
    x, y = schema.encode(frame, where=f"{where} ({found['data']})")
    x_test, y_test = schema.encode(read_table(path.parent / found["test"], where=where), where=f"{where} (test)")
    return make_pool(where, x, y, x_test, y_test, schema.classes, flip_ok=False, schema=schema)


def write_schema_file(path: str | os.PathLike, schema: Schema, data: str, test: str | None = None) -> Path:
    """Write the schema file `load_schema_file` reads (the rows' files named relative to it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    found = {**schema.to_json(), "data": data, **({"test": test} if test else {})}
    path.write_text(json.dumps(found, indent=2) + "\n")
    return path


def member_table(pool: Pool, rows: np.ndarray):
    """The pandas DataFrame of pool rows `rows` (bool mask or indices), in the schema's own values."""
    rows = np.flatnonzero(rows) if np.asarray(rows).dtype == bool else np.asarray(rows)
    return pool.schema.decode(pool.x[rows], pool.y[rows])


def unheld_rows(pool: Pool, per_column: int) -> np.ndarray:
    """int64 indices of the pool rows that hold none of each feature column's `per_column` rarest
    cells (`Schema.codes`; ties in the schema's order): the rows `unheld_subset` keeps."""
    codes = pool.schema.codes(pool.x, pool.y)
    kept = np.ones(len(codes), dtype=bool)
    for j, size in enumerate(pool.schema.domain_sizes[:-1]):
        rarest = np.argsort(np.bincount(codes[:, j], minlength=size), kind="stable")[:per_column]
        kept &= ~np.isin(codes[:, j], rarest)
    return np.flatnonzero(kept)


def unheld_subset(pool: Pool, per_column: int) -> Pool:
    """The table's worst-case pool for black-box audits of its noise (`--pool-unheld K`), named
    `<name>-unheld-K`: the pool rows holding none of each feature's K rarest cells, with the pool's
    test split. The schema is unchanged; the pool is the auditor's choice, as a worst-case pool is."""
    if pool.schema is None:
        raise DataError(f"--pool-unheld makes a table's pool; --dataset {pool.name} holds images")
    if per_column < 1:
        raise DataError(f"--pool-unheld must be at least 1, got {per_column}")
    rows = unheld_rows(pool, per_column)
    if not len(rows):
        raise DataError(f"--pool-unheld {per_column}: no record of {pool.name} holds none of the rarest cells")
    name = f"{pool.name}-unheld-{per_column}"
    return make_pool(
        name, pool.x[rows], pool.y[rows], pool.x_test, pool.y_test, pool.classes, flip_ok=False, schema=pool.schema
    )
