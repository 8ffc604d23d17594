"""The public schema of a table and the tabular pools: the embedded fair and randhie tables, and a
table of your own from its schema file (victims.tabular.schema, victims.tabular.pools)."""

import json

import numpy as np
import pandas as pd
import pytest

from audit import lira
from victims.data import load_pool
from victims.pool import DataError
from victims.tabular.pools import FAIR_SCHEMA, member_table, write_schema_file
from victims.tabular.schema import Column, Schema

#: a hand-made schema: a categorical colour, an integer count in [0, 10] (5 bins of width 2), a
#: continuous share in [0, 1] (4 bins of width 0.25) and a yes/no label
SMALL = Schema(
    columns=(
        Column("colour", "categorical", categories=("red", "green", "blue")),
        Column("count", "integer", lower=0, upper=10, bins=5),
        Column("share", "continuous", lower=0.0, upper=1.0, bins=4),
        Column("label", "categorical", categories=("no", "yes")),
    ),
    label="label",
)


def small_frame():
    return pd.DataFrame(
        {
            "colour": ["red", "blue", "green", "blue"],
            "count": [0, 10, 3, 4],
            "share": [0.0, 1.0, 0.26, 0.5],
            "label": ["yes", "no", "no", "yes"],
        }
    )


def test_a_schema_encodes_categories_as_indices_and_numbers_as_they_are():
    x, y = SMALL.encode(small_frame(), where="t")
    assert x.dtype == np.float32 and y.dtype == np.int64
    np.testing.assert_array_equal(x[:, 0], [0, 2, 1, 2])  # red, blue, green, blue
    np.testing.assert_allclose(x[:, 1:], [[0, 0.0], [10, 1.0], [3, 0.26], [4, 0.5]], rtol=1e-7)
    np.testing.assert_array_equal(y, [1, 0, 0, 1])
    assert SMALL.classes == ("no", "yes") and SMALL.domain_sizes == (3, 5, 4, 2)
    # cells: count 0 -> bin 0, 10 -> the top bin 4 (the upper bound is inside), 3 -> bin 1 (3 // 2), 4 -> bin 2;
    # share 0 -> 0, 1.0 -> 3, 0.26 -> 1 (0.26 // 0.25), 0.5 -> 2; the label last
    np.testing.assert_array_equal(SMALL.codes(x, y), [[0, 0, 0, 1], [2, 4, 3, 0], [1, 1, 1, 0], [2, 2, 2, 1]])
    back = SMALL.decode(x, y)
    assert list(back.columns) == ["colour", "count", "share", "label"]
    assert back["colour"].tolist() == ["red", "blue", "green", "blue"] and back["count"].tolist() == [0, 10, 3, 4]


def test_cells_map_back_inside_their_bins():
    codes = np.array([[0, 0, 0, 1], [2, 4, 3, 0]] * 50)
    x, y = SMALL.from_codes(codes, np.random.default_rng(0))
    np.testing.assert_array_equal(SMALL.codes(x, y), codes)  # every value drawn lies in its own cell
    assert set(np.unique(x[:, 1])) <= set(range(11))  # integers stay integers
    SMALL.check_rows(x, y, where="t")


def test_numbers_match_categories_whatever_the_file_spells():
    # a CSV of fair's codes reads 3 or 3.0; the schema's category is the number 3
    column = Column("rating", "categorical", categories=(1, 2, 3))
    np.testing.assert_array_equal(column.encode(np.array(["3", 3.0, 1], dtype=object), where="t"), [2, 2, 0])


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda f: f.assign(colour=["red", "purple", "red", "red"]), r"column 'colour' holds 'purple', outside its"),
        (lambda f: f.assign(count=[0, 11, 3, 4]), r"column 'count' holds 11.0, outside its public domain"),
        (lambda f: f.assign(count=[0, 1.5, 3, 4]), r"column 'count' holds 1.5, outside its public domain \(an integer"),
        (lambda f: f.assign(share=[0.0, np.nan, 0.2, 0.1]), r"column 'share' holds nan, outside its public domain"),
        (lambda f: f.assign(extra=1), r"column 'extra' is not in the schema"),
        (lambda f: f.drop(columns="label"), r"no label column 'label'"),
        (lambda f: f.drop(columns="share"), r"no column 'share'"),
        (lambda f: f.iloc[:0], r"no rows"),
    ],
)
def test_a_table_outside_its_schema_is_refused_naming_the_value(change, message):
    with pytest.raises(DataError, match=f"^t: {message}"):
        SMALL.encode(change(small_frame()), where="t")


@pytest.mark.parametrize(
    "found,message",
    [
        ({"label": "a", "columns": [{"name": "a", "kind": "categorical", "categories": ["x"]}]}, "2 or more distinct"),
        ({"label": "a", "columns": [{"name": "a", "kind": "text"}]}, "kind 'text' is none of"),
        ({"label": "b", "columns": [{"name": "a", "kind": "categorical", "categories": [0, 1]}]}, "label 'b' is none"),
        (
            {"label": "a", "columns": [{"name": "a", "kind": "integer", "lower": 0, "upper": 5, "bins": 5}]},
            "label 'a' must be categorical",
        ),
        (
            {"label": "a", "columns": [{"name": "a", "kind": "continuous", "lower": 2, "upper": 1, "bins": 3}]},
            "lower 2 must be below upper 1",
        ),
        ({"label": "a", "columns": [{"name": "a", "kind": "categorical", "colours": 1}]}, "unknown key 'colours'"),
    ],
)
def test_a_bad_schema_is_refused_naming_the_value(found, message):
    with pytest.raises(DataError, match=message):
        Schema.from_json(found, where="s.json")


def test_a_schema_round_trips_through_json():
    assert Schema.from_json(json.loads(json.dumps(SMALL.to_json())), where="t") == SMALL


def test_fair_is_the_embedded_survey_split_5000_and_1366():
    pool = load_pool("fair")
    assert pool.tabular and pool.schema == FAIR_SCHEMA and pool.x.shape == (5000, 8) and pool.x_test.shape == (1366, 8)
    assert pool.classes == ("1", "2", "3", "4", "5")  # the marriage rating
    # every rating in the pool and in the test split (stratified), 6,366 respondents in all
    assert (np.bincount(pool.y, minlength=5) > 0).all() and (np.bincount(pool.y_test, minlength=5) > 0).all()
    assert pool.fingerprint == load_pool("fair").fingerprint
    assert member_table(pool, [0, 1]).shape == (2, 9)


def test_randhie_is_the_person_years_split_16000_and_4190():
    pool = load_pool("randhie")
    assert pool.tabular and pool.x.shape == (16000, 9) and pool.x_test.shape == (4190, 9)
    assert pool.schema.label == "hlthg" and pool.classes == ("0", "1")


def write_table(tmp_path, frame, schema=SMALL, **files):
    frame.to_csv(tmp_path / "rows.csv", index=False)
    return write_schema_file(tmp_path / "table.json", schema, "rows.csv", **files)


def test_a_schema_file_loads_its_csv_and_holds_out_a_fifth(tmp_path):
    frame = pd.concat([small_frame()] * 10, ignore_index=True)
    pool = load_pool(str(write_table(tmp_path, frame)))
    assert pool.tabular and pool.n_pool == 32 and len(pool.y_test) == 8  # 20% of 40 rows held out
    assert pool.schema == SMALL


def test_a_schema_file_with_its_own_test_split_and_a_parquet_table(tmp_path):
    small_frame().to_parquet(tmp_path / "test.parquet")
    pool = load_pool(str(write_table(tmp_path, small_frame(), test="test.parquet")))
    assert pool.n_pool == 4 and len(pool.y_test) == 4


def test_the_fingerprint_covers_the_schema(tmp_path):
    frame = pd.concat([small_frame()] * 10, ignore_index=True)
    first = load_pool(str(write_table(tmp_path, frame)))
    wider = Schema(
        columns=(*SMALL.columns[:2], Column("share", "continuous", lower=0.0, upper=2.0, bins=4), SMALL.columns[3]),
        label="label",
    )
    second = load_pool(str(write_table(tmp_path, frame, schema=wider)))
    assert np.array_equal(first.x, second.x) and first.fingerprint != second.fingerprint


@pytest.mark.parametrize(
    "change,line",
    [
        (lambda f: f.assign(colour=["red", "purple"] * 2), "column 'colour' holds 'purple', outside its public"),
        (lambda f: f.rename(columns={"count": "counts"}), "no column 'count'"),
        (lambda f: f.drop(columns="label"), "no label column 'label'"),
    ],
)
def test_the_cli_refuses_a_table_outside_its_schema_with_exit_2_and_writes_nothing(tmp_path, capsys, change, line):
    data = tmp_path / "data"
    data.mkdir()
    schema_file = write_table(data, pd.concat([change(small_frame())] * 10, ignore_index=True))
    runs = tmp_path / "runs"
    with pytest.raises(SystemExit) as exit_info:
        lira.main(
            ["--victim", "tabular-subset", "--dataset", str(schema_file), "--n-shadow", "4", "--runs-dir", str(runs)]
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and line in err and str(schema_file) in err
    assert not runs.exists()


def test_the_unheld_pool_leaves_each_feature_s_rarest_cells_empty_and_keeps_the_rest():
    from victims import load_pool
    from victims.tabular.pools import unheld_rows, unheld_subset

    fair = load_pool("fair")
    codes = fair.schema.codes(fair.x, fair.y)
    cut = unheld_subset(fair, 1)
    kept = fair.schema.codes(cut.x, cut.y)
    rarest = [
        int(np.argmin(np.bincount(codes[:, j], minlength=s))) for j, s in enumerate(fair.schema.domain_sizes[:-1])
    ]
    # each feature's rarest cell (the first on a tie) is held by no kept record, and every record holding none is kept
    holds_none = ~np.column_stack([codes[:, j] == c for j, c in enumerate(rarest)]).any(1)
    np.testing.assert_array_equal(unheld_rows(fair, 1), np.flatnonzero(holds_none))
    assert cut.n_pool == holds_none.sum() == len(kept) and cut.name == "fair-unheld-1"
    assert all((kept[:, j] != c).all() for j, c in enumerate(rarest))
    assert cut.schema is fair.schema and (cut.x_test == fair.x_test).all() and cut.fingerprint != fair.fingerprint


def test_an_unheld_pool_of_images_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys):
    from audit import lira

    runs = tmp_path / "runs"
    with pytest.raises(SystemExit) as e:
        lira.main(
            [
                "--victim",
                "subset",
                "--dataset",
                "digits",
                "--pool-unheld",
                "1",
                "--n-shadow",
                "4",
                "--runs-dir",
                str(runs),
            ]
        )
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["python -m audit.lira: error: --pool-unheld makes a table's pool; --dataset digits holds images"]
    assert not runs.exists()
