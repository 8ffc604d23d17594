"""Canaries of a table (victims.tabular.canaries through victims.canaries): unseen records in
cells no pool record holds, extreme records at the public bounds, both inside the schema,
deterministic per seed; a kind of the other data refused with one line."""

import json

import numpy as np
import pytest

from victims.canaries import CanaryConfig, add_canaries, canary_arrays
from victims.pool import make_pool
from victims.tabular.canaries import extreme_records, rare_categories, unseen_records
from victims.tabular.schema import Column, Schema

pytest.importorskip("statsmodels")


@pytest.fixture(scope="module")
def fair():
    from victims import load_pool

    return load_pool("fair")


def cells(pool, x, y):
    return {tuple(row) for row in pool.schema.codes(x, y).tolist()}


def test_unseen_canaries_fall_in_cells_no_pool_record_holds_and_in_distinct_cells(fair):
    x, y, source = canary_arrays(fair, CanaryConfig(n=64, kind="unseen", seed=0))
    assert x.shape == (64, len(fair.schema.features)) and y.shape == (64,) and (source == -1).all()
    fair.schema.check_rows(x, y, where="canaries")  # inside the schema
    found = cells(fair, x, y)
    assert len(found) == 64  # distinct canaries, distinct cells
    assert not found & cells(fair, fair.x, fair.y)  # none a pool record holds
    # and no pool record equals any canary, value for value
    pool_rows = {tuple(r) for r in np.column_stack([fair.x, fair.y]).tolist()}
    assert not {tuple(r) for r in np.column_stack([x, y]).tolist()} & pool_rows


def test_canaries_are_the_same_for_a_seed_and_differ_between_seeds(fair):
    for kind in ("unseen", "extreme"):
        a = canary_arrays(fair, CanaryConfig(n=16, kind=kind, seed=5))
        b = canary_arrays(fair, CanaryConfig(n=16, kind=kind, seed=5))
        c = canary_arrays(fair, CanaryConfig(n=16, kind=kind, seed=6))
        assert all(np.array_equal(u, v) for u, v in zip(a, b))
        assert not np.array_equal(a[0], c[0])


def test_extreme_canaries_sit_at_the_bound_no_pool_record_reaches_with_rare_categories(fair):
    x, y, _ = canary_arrays(fair, CanaryConfig(n=32, kind="extreme", seed=1))
    fair.schema.check_rows(x, y, where="canaries")
    affairs = [c.name for c in fair.schema.features].index("affairs")
    assert fair.x[:, affairs].max() < 60.0  # the pool never reaches the upper bound ...
    assert (x[:, affairs] == 60.0).all()  # ... so every canary sits there
    for j, column in enumerate(fair.schema.features):
        if column.kind == "categorical":
            counts = np.bincount(fair.x[:, j].astype(int), minlength=column.size)
            assert set(x[:, j].astype(int)) <= set(rare_categories(counts).tolist())
    assert set(y.tolist()) <= {0, 1, 2}  # rate_marriage 1, 2, 3: the three rarest of five labels
    assert len({tuple(r) for r in np.column_stack([x, y]).tolist()}) == 32  # distinct records


def small_schema():
    return Schema(
        columns=(
            Column("colour", "categorical", categories=("red", "green", "blue")),
            Column("size", "integer", lower=0, upper=10, bins=2),
            Column("label", "categorical", categories=(0, 1)),
        ),
        label="label",
    )


def small_pool(x, y):
    return make_pool("small", x, y, x[:2], y[:2], ("0", "1"), flip_ok=False, schema=small_schema())


def test_an_unseen_canary_holds_the_category_no_pool_record_holds():
    # nobody is blue (category 2): every unseen canary is, whatever else it draws
    x = np.array([[0, 1], [1, 9], [0, 3], [1, 7]], dtype=np.float32)
    y = np.array([0, 1, 1, 0])
    pool = small_pool(x, y)
    cx, cy, _ = canary_arrays(pool, CanaryConfig(n=4, kind="unseen", seed=0))
    assert (cx[:, 0] == 2).all()
    assert len(cells(pool, cx, cy)) == 4


def test_unseen_canaries_each_hold_their_unheld_category_alone(fair):
    # a pool holding none of four public categories (age 17.5, educ 9, occupation 1, husband's
    # occupation 1, in schema order): canary j holds the j-th, and its other cells only categories
    # the pool holds, so each unheld category has exactly one record (the domain-extension attack's
    # condition); before, a canary's random cells could take another's, and both lost it
    names = [c.name for c in fair.schema.features]
    unheld = [("age", 0), ("educ", 0), ("occupation", 0), ("occupation_husb", 0)]  # code 0: the first category
    held = np.ones(fair.n_pool, dtype=bool)
    for name, code in unheld:
        held &= fair.x[:, names.index(name)] != code
    pool = make_pool(
        "cut", fair.x[held], fair.y[held], fair.x_test, fair.y_test, fair.classes, flip_ok=False, schema=fair.schema
    )
    for seed in range(5):
        cx, cy, _ = canary_arrays(pool, CanaryConfig(n=4, kind="unseen", seed=seed))
        for j, (name, code) in enumerate(unheld):
            column = cx[:, names.index(name)]
            assert column[j] == code and np.count_nonzero(column == code) == 1, (seed, j, name)


def test_extreme_canaries_take_the_lower_bound_where_the_pool_reaches_the_upper():
    x = np.array([[0, 10], [1, 9], [2, 4], [1, 7]], dtype=np.float32)
    y = np.array([0, 1, 1, 1])
    cx, cy = extreme_records(small_schema(), x, y, 2, np.random.default_rng(0))
    assert (cx[:, 1] == 0).all()  # 10 is reached, 0 is not
    assert (cy == 0).all()  # the rarer label
    assert set(cx[:, 0].tolist()) <= {0.0, 2.0}  # red and blue: one record each


def test_a_schema_without_room_is_refused_with_one_line():
    schema = small_schema()
    rows = np.array([[c, size, label] for c in range(3) for size in (2, 8) for label in range(2)])
    x, y = rows[:, :2].astype(np.float32), rows[:, 2]  # every one of the 12 cells held (size bins [0, 5), [5, 10])
    with pytest.raises(ValueError, match="it has 0$"):
        unseen_records(schema, x, y, 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="make 2$"):  # 2 rare colours x 1 bound x 1 rare label
        extreme_records(schema, x, y, 3, np.random.default_rng(0))


def test_add_canaries_appends_table_rows_after_the_natural_pool(fair):
    config = CanaryConfig(n=16, kind="unseen", seed=0)
    with_canaries = add_canaries(fair, config)
    x, y, _ = canary_arrays(fair, config)
    assert with_canaries.tabular and with_canaries.schema is fair.schema and with_canaries.n_pool == fair.n_pool + 16
    assert np.array_equal(with_canaries.x[: fair.n_pool], fair.x) and np.array_equal(with_canaries.x[fair.n_pool :], x)
    assert np.array_equal(with_canaries.y[fair.n_pool :], y)
    assert np.array_equal(with_canaries.x_test, fair.x_test) and with_canaries.fingerprint != fair.fingerprint


@pytest.mark.parametrize("kind", ["mislabeled", "blank", "duplicate"])
def test_an_image_kind_on_a_table_is_refused_naming_the_kind_and_dataset(fair, kind):
    with pytest.raises(ValueError) as e:
        add_canaries(fair, CanaryConfig(n=4, kind=kind))
    assert str(e.value) == (
        f"--canary-kind {kind} makes images; --dataset fair is a table (its kinds: unseen, extreme, unheld, "
        "record, and gradient "
        "under white-box)"
    )


@pytest.mark.parametrize("kind", ["unseen", "extreme", "unheld"])
def test_a_tables_kind_on_images_is_refused_naming_the_kind_and_dataset(kind):
    rng = np.random.default_rng(0)
    images = make_pool(
        "pics", rng.random((20, 1, 4, 4)), np.arange(20) % 2, rng.random((4, 1, 4, 4)), [0, 1, 0, 1], ("a", "b"), False
    )
    with pytest.raises(ValueError, match=f"^--canary-kind {kind} makes table records; --dataset pics holds images"):
        add_canaries(images, CanaryConfig(n=4, kind=kind))


QUIET = ["--executor", "inline", "--quiet"]


def test_an_audit_of_fair_with_unseen_canaries_reports_them_apart_from_the_natural_records(tmp_path):
    from audit import lira
    from audit.reporting.build import Settings, build_report
    from audit.results import load_audited

    runs_dir = tmp_path / "runs"
    argv = ["--victim", "tabular-subset", "--dataset", "fair", "--n-shadow", "8", "--runs-dir", str(runs_dir)]
    small = ["--rows", "300", "--classifier-iterations", "10"]  # what is counted, not what is measured
    assert lira.main([*argv, *small, "--canaries", "16", "--canary-kind", "unseen", *QUIET]) == 0
    (root,) = [p for p in runs_dir.iterdir() if p.is_dir()]
    entry = {"n": 16, "kind": "unseen", "copies": None, "seed": 0, "first_row": 5000, "n_natural": 5000}
    assert json.loads((root / "experiment.json").read_text())["canaries"] == entry
    keep = np.load(root / "keep.npy")
    summary = json.loads((root / "audit" / "summary.json").read_text())
    assert summary["evaluation"]["canaries"] == entry and summary["evaluation"]["n_canaries"] == 4 * 16
    for name, attack in summary["attacks"].items():
        # the top level is the 4 targets x 16 canary coins, the natural group the 4 x 5000 others
        assert attack["n_members"] == keep[:4, 5000:].sum() and attack["n_nonmembers"] == (~keep[:4, 5000:]).sum()
        assert attack["natural"]["n_members"] == keep[:4, :5000].sum(), name
    # the report of a table's audit is built (no image grids for its records)
    built = build_report([load_audited(root)], settings=Settings(n_boot=10))
    assert built.data["experiments"][0]["highest_risk"]["examples"]


def test_a_tables_audit_given_an_image_kind_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys):
    from audit import lira

    argv = ["--victim", "tabular-subset", "--dataset", "fair", "--n-shadow", "4", "--runs-dir", str(tmp_path / "runs")]
    with pytest.raises(SystemExit) as exit_info:
        lira.main([*argv, "--canaries", "4", "--canary-kind", "marked", *QUIET])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert "--canary-kind marked makes images; --dataset fair is a table" in err
    assert not (tmp_path / "runs").exists()


def test_extreme_canaries_take_turns_at_the_numeric_columns_bounds():
    # two numbers: a in [0, 10] (pool 2..6: neither bound reached; 0 is 2 away, 10 is 4 away: 10),
    # b in [0, 1] (pool 0.2..1.0: 1 reached, so 0); the medians are 4 and 0.6
    schema = Schema(
        columns=(
            Column("a", "continuous", lower=0, upper=10, bins=2),
            Column("b", "continuous", lower=0, upper=1, bins=2),
            Column("label", "categorical", categories=(0, 1)),
        ),
        label="label",
    )
    x = np.array([[2, 0.2], [4, 0.6], [6, 1.0]], dtype=np.float32)
    cx, cy = extreme_records(schema, x, np.array([0, 1, 1]), 2, np.random.default_rng(0))
    # canary 0: a at its bound, b at the median; canary 1 the other way round; both the rarer label 0
    np.testing.assert_allclose(cx, [[10.0, 0.6], [4.0, 0.0]])
    assert (cy == 0).all()
    with pytest.raises(ValueError, match="make 2$"):  # one rare label, two numbers taking turns: two records
        extreme_records(schema, x, np.array([0, 1, 1]), 3, np.random.default_rng(0))


def test_unheld_canaries_are_each_the_only_record_of_their_label_in_every_empty_feature_cell(fair):
    from victims.tabular.pools import unheld_subset

    pool = unheld_subset(fair, 2)  # 2 cells of every feature column left empty
    x, y, _ = canary_arrays(pool, CanaryConfig(n=10, kind="unheld", seed=0))
    pool.schema.check_rows(x, y, where="canaries")
    natural, canary = pool.schema.codes(pool.x, pool.y), pool.schema.codes(x, y)
    d = len(pool.schema.features)
    # labels take turns (5 labels, 2 turns): canary i has label i mod 5
    np.testing.assert_array_equal(canary[:, d], np.arange(10) % 5)
    seen = set()
    for j in range(d):
        held = set(natural[:, j].tolist())
        for i in range(10):
            assert canary[i, j] not in held  # an empty cell of every feature column
            assert (canary[i, d], j, canary[i, j]) not in seen  # shared with no other canary
            seen.add((canary[i, d], j, canary[i, j]))
    # 5 labels x 2 empty cells a column hold 10; an eleventh would share a cell: refused in one line
    with pytest.raises(ValueError, match=r"^--canaries 11 unheld canaries .* at most 10\)$"):
        canary_arrays(pool, CanaryConfig(n=11, kind="unheld", seed=0))


def test_an_unheld_canary_takes_its_label_s_commonest_cell_where_a_column_has_no_empty_one():
    from victims.tabular.canaries import unheld_records

    schema = Schema(
        columns=(
            Column("colour", "categorical", categories=("red", "green", "blue")),
            Column("size", "categorical", categories=("small", "large")),
            Column("label", "categorical", categories=(0, 1)),
        ),
        label="label",
    )
    # nobody is blue (colour 2); both sizes are held: label 0's commonest size is large (1), label 1's small (0)
    x = np.array([[0, 1], [1, 1], [0, 0], [1, 0], [0, 0]], dtype=np.float32)
    y = np.array([0, 0, 0, 1, 1])
    cx, cy = unheld_records(schema, x, y, 2, np.random.default_rng(0))
    np.testing.assert_array_equal(cx, [[2, 1], [2, 0]])
    np.testing.assert_array_equal(cy, [0, 1])
    with pytest.raises(ValueError, match="at most 2"):
        unheld_records(schema, x, y, 3, np.random.default_rng(0))
