"""The attacks on a released table (attacks/tabular/): Gower's distance and the DCR on it, the
release's kernel density and DOMIAS, the counting queries; and their place in an audit: a tabular
run's summary.json has them, an image run's none of them."""

import json
from itertools import combinations

import numpy as np
import pytest

from attacks.lira import lira_online
from attacks.registry import TABLE, attack_names, get_attack
from attacks.tabular import (
    TableColumns,
    domias_scores,
    gower_distances,
    match_counts,
    nearest_and_density,
    queries,
    query_scores,
    release_statistics,
)
from attacks.tabular.queries import count_statistic
from audit import lira

# A hand-made table of 3 columns: colour (categorical, 3 categories), age (integer, PUBLIC bounds
# [0, 100], so its span is 100 whatever the rows' own range), and the label (categorical, 2 classes).
COLUMNS = TableColumns(categorical=[True, False, True], span=[1.0, 100.0, 1.0], sizes=[3, 10, 2])
POOL = np.array([[0, 20, 1], [1, 70, 1], [0, 20, 0]], dtype=float)  # records a, b, c
RELEASE = np.array([[0, 30, 1], [2, 20, 0]], dtype=float)  # released r1, r2
# Gower = mean over the 3 columns of (colour mismatch, |age - age'| / 100, label mismatch):
#   G(a, r1) = (0 + 10/100 + 0) / 3 = 0.1 / 3     G(a, r2) = (1 + 0 + 1) / 3 = 2 / 3
#   G(b, r1) = (1 + 40/100 + 0) / 3 = 1.4 / 3     G(b, r2) = (1 + 50/100 + 1) / 3 = 2.5 / 3
#   G(c, r1) = (0 + 10/100 + 1) / 3 = 1.1 / 3     G(c, r2) = (1 + 0 + 0) / 3 = 1 / 3
POOL_CODES = np.array([[0, 2, 1], [1, 7, 1], [0, 2, 0]])  # age in 10 bins of 10 years: 20 -> 2, 70 -> 7
RELEASE_CODES = np.array([[0, 3, 1], [2, 2, 0]])
GOWER = np.array([[0.1, 2.0], [1.4, 2.5], [1.1, 1.0]]) / 3
F32 = 1e-6  # Gower's distances are float32 (attacks/tabular/gower.py)


def test_gower_s_distance_is_the_mean_of_per_column_distances_on_the_public_bounds():
    np.testing.assert_allclose(gower_distances(POOL, RELEASE, COLUMNS), GOWER, rtol=F32)
    # the pool's own range of age (20..70) would give G(b, r1) = (1 + 40/50 + 0) / 3 = 0.6 instead: never used
    assert gower_distances(POOL[1:2], RELEASE[:1], COLUMNS)[0, 0] == pytest.approx(1.4 / 3, rel=F32)


def test_gower_s_blocks_give_the_whole_matrix():
    from attacks.tabular.gower import gower_blocks

    blocks = list(gower_blocks(POOL, RELEASE, COLUMNS, block_cells=2))  # one record (2 cells) per block
    assert [start for start, _ in blocks] == [0, 1, 2]
    np.testing.assert_allclose(np.concatenate([g for _, g in blocks]), GOWER, rtol=F32)


def test_the_dcr_and_the_density_of_a_release():
    nearest, log_density = nearest_and_density(POOL, RELEASE, COLUMNS, bandwidth=1.0)
    # nearest: a -> r1 (0.1/3), b -> r1 (1.4/3), c -> r2 (1/3)
    np.testing.assert_allclose(nearest, [0.1 / 3, 1.4 / 3, 1.0 / 3], rtol=F32)
    # density: (1/2) sum_r exp(-3 G(x, r) / 1), i.e. a: (e^{-0.1} + e^{-2}) / 2, b: (e^{-1.4} + e^{-2.5}) / 2,
    # c: (e^{-1.1} + e^{-1}) / 2
    expected = np.log(
        [(np.exp(-0.1) + np.exp(-2)) / 2, (np.exp(-1.4) + np.exp(-2.5)) / 2, (np.exp(-1.1) + np.exp(-1)) / 2]
    )
    np.testing.assert_allclose(log_density, expected, rtol=F32)
    # bandwidth 2 halves every exponent: (e^{-0.05} + e^{-1}) / 2 for a
    _, wide = nearest_and_density(POOL[:1], RELEASE, COLUMNS, bandwidth=2.0)
    assert wide[0] == pytest.approx(np.log((np.exp(-0.05) + np.exp(-1)) / 2), rel=F32)
    with pytest.raises(ValueError, match="the release is empty"):
        nearest_and_density(POOL, RELEASE[:0], COLUMNS)


def test_a_far_release_keeps_the_density_finite():
    # bandwidth 1e-3: every kernel exp(-3000 G) underflows float64 unless shifted by the closest record's
    columns = TableColumns(categorical=[True, True], span=[1.0, 1.0], sizes=[2, 2])
    _, log_density = nearest_and_density(np.array([[0.0, 0.0]]), np.array([[1.0, 1.0]]), columns, bandwidth=1e-3)
    assert log_density[0] == pytest.approx(-2 * 1.0 / 1e-3, rel=F32)  # log exp(-2 G / b), G = 1


def test_records_that_do_not_fit_the_columns_are_refused():
    with pytest.raises(ValueError, match=r"records must be \[n, 3\]"):
        gower_distances(POOL[:, :2], RELEASE, COLUMNS)
    with pytest.raises(ValueError, match="span"):
        TableColumns(categorical=[True, False], span=[1.0, 0.0], sizes=[2, 3])


def test_domias_divides_the_target_s_density_by_the_mean_over_its_shadows():
    density = np.array([[0.4, 0.1], [0.2, 0.3], [0.6, 0.1]])  # runs x records
    # target 0 against runs 1 and 2: reference (0.2 + 0.6) / 2 = 0.4 and (0.3 + 0.1) / 2 = 0.2, so
    # log(0.4 / 0.4) = 0 and log(0.1 / 0.2) = -log 2; target 2 against run 1 alone: log 3, log(1/3)
    scores = domias_scores(np.log(density), np.array([0, 2]), shadows=np.array([[0, 1, 1], [0, 1, 0]], dtype=bool))
    np.testing.assert_allclose(scores, [[0.0, -np.log(2)], [np.log(3), -np.log(3)]], atol=1e-12)
    with pytest.raises(ValueError, match="a shadow per target"):
        domias_scores(np.log(density), np.array([0]), shadows=np.zeros((1, 3), dtype=bool))


def test_domias_on_two_hand_made_releases():
    # run 0 released r1, run 1 released r2: record a's density is (e^{-0.1}) in run 0 and (e^{-2}) in
    # run 1 (bandwidth 1, D = 3), so DOMIAS of target 0 against shadow 1 at a is -0.1 - (-2) = 1.9
    found = [
        release_statistics(POOL, POOL_CODES, RELEASE[i : i + 1], RELEASE_CODES[i : i + 1], COLUMNS) for i in (0, 1)
    ]
    density = np.stack([f.log_density for f in found])
    scores = domias_scores(density, np.array([0]), shadows=np.array([[False, True]]))
    # b: -1.4 - (-2.5) = 1.1; c: -1.1 - (-1) = -0.1
    np.testing.assert_allclose(scores[0], [1.9, 1.1, -0.1], rtol=F32)
    np.testing.assert_allclose(found[0].dcr, [-0.1 / 3, -1.4 / 3, -1.1 / 3], rtol=F32)  # minus the distance


def test_the_queries_are_the_full_record_and_every_pair():
    assert queries(3) == ((0, 1, 2), (0, 1), (0, 2), (1, 2))
    assert queries(2) == ((0, 1),)
    assert len(queries(9)) == 1 + 36  # fair: 8 features and the label


def test_match_counts_by_hand():
    sizes, pool = COLUMNS.sizes, POOL_CODES  # a, b, c
    release = np.array([[0, 2, 1], [0, 2, 1], [0, 3, 0], [1, 2, 1]])
    # a = (0, 2, 1): full record: rows 0, 1 -> 2; (0, 1) = (0, 2): rows 0, 1 -> 2; (0, 2) = (0, 1): rows 0, 1 -> 2;
    #                (1, 2) = (2, 1): rows 0, 1, 3 -> 3
    # b = (1, 7, 1): full 0; (1, 7): 0; (1, 1): row 3 -> 1; (7, 1): 0
    # c = (0, 2, 0): full 0; (0, 2): rows 0, 1 -> 2; (0, 0): row 2 -> 1; (2, 0): 0
    counts = match_counts(pool, release, sizes)
    assert counts.dtype == np.int32
    np.testing.assert_array_equal(counts, [[2, 2, 2, 3], [0, 0, 1, 0], [0, 2, 1, 0]])
    with pytest.raises(ValueError, match="outside its column's domain"):
        match_counts(pool, release + np.array([0, 0, 1]), sizes)


def test_the_count_statistic_is_anscombe_s():
    # 2 sqrt(c + 3/8): 0 -> 2 sqrt(0.375) = sqrt(1.5); 1 -> 2 sqrt(1.375) = sqrt(5.5); 6 -> 2 sqrt(6.375) = sqrt(25.5)
    np.testing.assert_allclose(count_statistic(np.array([0, 1, 6])), np.sqrt([1.5, 5.5, 25.5]), rtol=1e-15)


def test_query_scores_are_online_lira_averaged_over_the_queries_block_by_block():
    rng = np.random.default_rng(0)
    keep = rng.random((8, 30)) < 0.5
    counts = rng.poisson(3, (8, 30, 5)) + 2 * keep[..., None]  # a member adds to its cells
    targets, shadows = np.array([0, 1]), np.zeros((2, 8), dtype=bool)
    shadows[:, 2:] = True
    whole = lira_online(count_statistic(counts), keep, targets, shadows=shadows, variance="fixed")
    for cells in (1, 8 * 30 * 2, 1 << 20):  # a query per block, two, all
        found = query_scores(counts, keep, targets, shadows=shadows, variance="fixed", block_cells=cells)
        np.testing.assert_allclose(found, whole, rtol=1e-12)
    assert whole[keep[targets]].mean() > whole[~keep[targets]].mean()


def test_the_table_attacks_need_a_released_table():
    for name in ("domias", "queries"):
        attack = get_attack(name)
        assert attack.family == "release" and attack.needs == TABLE and attack.calibrated and attack.min_runs >= 2
        assert attack.missing() == f"{name} needs the released table of a tabular victim, and these runs stored none"
    assert {"dcr", "dcr_lira", "domias", "queries"} <= set(attack_names("release"))


def audited(runs_dir, *flags) -> dict:
    assert lira.main(["--runs-dir", str(runs_dir), "--executor", "inline", "--quiet", *flags]) == 0
    (root,) = [p for p in runs_dir.iterdir() if p.is_dir()]
    return json.loads((root / "audit" / "summary.json").read_text())


def test_a_tabular_audit_scores_the_table_attacks(tmp_path):
    pytest.importorskip("statsmodels")  # the fair table ships with it
    # the asserted attacks score the release alone, so a 10-round downstream classifier leaves them as they were
    # with the default 100 rounds (at 8 runs: the same AUCs and bounds to the last digit). 4 runs (2 targets):
    # AUC over seeds 0-4 mean / sd / min: dcr 0.922 / 0.003 / 0.919, dcr_lira 0.901 / 0.010 / 0.888, domias
    # 0.780 / 0.005 / 0.771, queries 0.622 / 0.007 / 0.613, every eps_lower a number (`python -m audit.lira --victim
    # tabular-real --dataset fair --n-shadow 4 --classifier-iterations 10 --executor inline --quiet --seed S`, the
    # four read from summary.json; 2026-11-29): 0.5 is far below each minimum
    flags = ["--victim", "tabular-real", "--dataset", "fair", "--n-shadow", "4", "--classifier-iterations", "10"]
    summary = audited(tmp_path, *flags)
    for name in ("dcr", "dcr_lira", "domias", "queries"):
        assert 0.5 < summary["attacks"][name]["auc"] <= 1.0, name  # the release is every member: a signal
        assert summary["attacks"][name]["eps_lower"] is not None


def test_an_image_audit_scores_none_of_the_table_attacks(tmp_path, tiny_flags):
    summary = audited(tmp_path, "--victim", "subset", "--ipc", "2", "--n-shadow", "4", *tiny_flags)
    assert {"dcr", "dcr_lira"} <= set(summary["attacks"])
    assert not {a.name for a in map(get_attack, attack_names()) if a.needs == TABLE} & set(summary["attacks"])


def test_every_pair_query_matches_its_columns_alone():
    # a release differing from the record in exactly one column matches the pairs without it, no other query
    sizes = np.array([2, 2, 2, 2])
    record = np.zeros((1, 4), dtype=int)
    for column in range(4):
        release = record.copy()
        release[0, column] = 1
        expected = [0] + [int(column not in pair) for pair in combinations(range(4), 2)]
        np.testing.assert_array_equal(match_counts(record, release, sizes)[0], expected)


def test_a_user_s_released_table_joins_the_shadow_runs_as_one_more_run():
    """audit.release's target run (`with_target`): a table's release gets the same statistics as a
    stored run's (`TablePool.statistics`), appended after the shadows'."""
    from types import SimpleNamespace

    from audit.evaluate import StoredRuns, TablePool
    from audit.releases.inputs import ReleaseInputs
    from audit.releases.target import with_target
    from victims.pool import make_pool
    from victims.tabular.schema import Column, Schema

    schema = Schema(
        columns=(
            Column("colour", "categorical", categories=("r", "g", "b")),
            Column("age", "integer", lower=0, upper=100, bins=10),
            Column("label", "categorical", categories=("no", "yes")),
        ),
        label="label",
    )
    x, y = POOL[:, :2].astype(np.float32), POOL[:, 2].astype(np.int64)
    pool = make_pool("hand", x, y, x, y, ("no", "yes"), False, schema=schema)
    table = TablePool.of(schema, pool.x, pool.y)
    np.testing.assert_array_equal(table.codes, POOL_CODES)
    np.testing.assert_array_equal(table.columns.span, [1.0, 100.0, 1.0])  # the public bounds, not the rows' 20..70
    shadow = table.statistics(RELEASE[:1, :2], RELEASE[:1, 2].astype(np.int64))
    shadows = StoredRuns(
        keep=np.array([[True, False, False]]),
        confidence=np.zeros((1, 3, 1)),
        loss=np.zeros((1, 3)),
        init_mask=np.zeros((1, 3), dtype=bool),
        meta=({},),
        dcr=shadow.dcr[None],
        release_density=shadow.log_density[None],
        release_counts=shadow.counts[None],
    )
    inputs = ReleaseInputs(
        pool,
        np.array([False, True, True]),
        np.arange(3),
        RELEASE[1:, :2],
        RELEASE[1:, 2].astype(np.int64),
        np.arange(0),
    )
    runs = with_target(shadows, SimpleNamespace(logits=np.zeros((3, 1, 2))), inputs, {})
    # the user's release is r2 alone: DCR -G(., r2) = -(2, 2.5, 1) / 3, density log e^{-3 G} = -(2, 2.5, 1)
    np.testing.assert_allclose(runs.dcr, [shadow.dcr, [-2 / 3, -2.5 / 3, -1 / 3]], rtol=F32)
    np.testing.assert_allclose(runs.release_density[1], [-2.0, -2.5, -1.0], rtol=F32)
    # r2's codes (2, 2, 0): no record matches in full; c = (0, 2, 0) matches it on (age, label) only
    np.testing.assert_array_equal(runs.release_counts[1], [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1]])


def test_domain_extension_counts_released_records_only_the_record_could_have_put_there():
    from attacks.tabular.support import domain_extension

    # columns: a category (0, 1, 2), a number, the label (categorical). Pool record 0 alone holds category 2
    # and the largest number 9 (the others' largest is 5); record 3 alone holds the smallest number -1
    # (the others' smallest is 0); record 2 alone holds label 1.
    pool = np.array([[2, 9.0, 0], [0, 5.0, 0], [1, 0.0, 1], [0, -1.0, 0], [1, 5.0, 0]])
    release = np.array([[2, 7.0, 0], [2, 9.0, 1], [0, 9.5, 0], [0, 5.0, 0], [1, -0.5, 0], [0, -1.0, 0]])
    categorical = np.array([True, False, True])
    # column by column: record 0: category 2 twice, numbers in (5, 9]: 7 and 9 (9.5 lies beyond its own
    # value): (2, 2, 0); record 2: label 1 once: (0, 0, 1); record 3: numbers in [-1, 0): -0.5 and -1:
    # (0, 2, 0); the others hold nothing alone
    found = domain_extension(pool, release, categorical)
    np.testing.assert_array_equal(found, [[2, 2, 0], [0, 0, 0], [0, 0, 1], [0, 2, 0], [0, 0, 0]])
    np.testing.assert_array_equal(found.sum(axis=1), [4, 0, 1, 2, 0])  # what `support` scores
    # a tie at the extreme opens nothing alone
    tied = pool.copy()
    tied[1, 1] = 9.0
    np.testing.assert_array_equal(domain_extension(tied, release, categorical)[0], [2, 0, 0])  # its category only


def test_pair_extension_counts_released_records_on_the_pairs_only_the_record_holds():
    from attacks.tabular.support import pair_extension

    # 3 discrete columns (sizes 2, 2, 2), pairs (0,1), (0,2), (1,2); pool records a, b, c, d:
    pool = np.array([[0, 0, 0], [0, 1, 0], [1, 0, 1], [0, 0, 1]])
    # alone on (0,1): b (0,1), c (1,0) [a and d share (0,0)]; on (0,2): c (1,1), d (0,1) [a and b share (0,0)];
    # on (1,2): a (0,0), b (1,0) [c and d share (0,1)]
    release = np.array([[0, 1, 0], [1, 0, 1], [1, 1, 1], [0, 0, 1]])
    # released per pair: (0,1): (0,1) 1, (1,0) 1; (0,2): (1,1) 2, (0,1) 1; (1,2): (0,0) 0, (1,0) 1
    # a: (1,2) (0,0): 0; b: 1 + 1 = 2; c: 1 + 2 = 3; d: 1
    np.testing.assert_array_equal(pair_extension(pool, release, np.array([2, 2, 2])), [0, 2, 3, 1])
    stats = release_statistics(
        pool.astype(float), pool, release.astype(float), release, TableColumns([True] * 3, [1.0] * 3, [2, 2, 2])
    )
    np.testing.assert_array_equal(stats.pair_support, [0, 2, 3, 1])
    attack = get_attack("pairs")
    assert attack.needs == TABLE and not attack.calibrated and attack.min_runs == 1
