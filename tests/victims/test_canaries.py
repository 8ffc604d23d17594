"""Canaries (victims.canaries): construction, their coins in the plan, the store's identity, the CLI
flags, and one tiny end-to-end audit whose top level is the canary group."""

import hashlib
import json

import numpy as np
import pytest

from audit import lira, release
from audit.evaluate import attack_summary
from shadow_runs.plan import membership_matrix, membership_row
from shadow_runs.records import CanaryColumns, canary_rows, first_rows, record_of_row
from shadow_runs.store import RunStore, experiment_id
from victims.canaries import CANARY_KINDS, CanaryConfig, add_canaries, canary_arrays, mark_size
from victims.pool import make_pool

TINY = ["--train-steps", "10", "--train-net-width", "8", "--executor", "inline", "--quiet"]


def test_kinds():
    assert CANARY_KINDS == ("mislabeled", "outlier", "duplicate", "gradient", "blank", "marked")


def test_blank_canaries_are_the_pools_darkest_page_with_labels_in_turn(pool):
    # digits' pixels span 0..1, so a blank page is all 0; 12 canaries over 10 classes: labels 0..9, 0, 1
    x, y, source = canary_arrays(pool, CanaryConfig(n=12, kind="blank", seed=3))
    assert x.shape == (12, *pool.image_shape) and float(pool.x.min()) == 0.0 and not x.any()
    assert y.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1] and (source == -1).all()


def test_marked_canaries_are_blank_pages_each_with_its_own_disjoint_mark(pool):
    # digits: 8x8 = 64 pixels in [0, 1]; 16 canaries: marks of min(64 // 16, 64 / 8) = 4 pixels at 1.0,
    # every other pixel at 0; the 16 marks are disjoint (64 distinct pixels in all); labels 0..9, 0..5
    x, y, source = canary_arrays(pool, CanaryConfig(n=16, kind="marked", seed=3))
    marks = x.reshape(16, -1) == 1.0
    assert x.shape == (16, *pool.image_shape) and set(np.unique(x).tolist()) == {0.0, 1.0}
    assert marks.sum(axis=1).tolist() == [4] * 16 and marks.any(axis=0).sum() == 64
    assert y.tolist() == [*range(10), *range(6)] and (source == -1).all()
    # the marks come from the canary seed alone: another seed, other pixels
    other, _, _ = canary_arrays(pool, CanaryConfig(n=16, kind="marked", seed=4))
    assert not np.array_equal(x, other)
    np.testing.assert_array_equal(x, canary_arrays(pool, CanaryConfig(n=16, kind="marked", seed=3))[0])


def test_a_mark_is_an_eighth_of_the_image_at_most_and_one_pixel_at_least():
    # 64 pixels: 8 up to n = 8 (64 / 8), then 64 // n: 4 at 16, 2 at 32, 1 at 64
    assert [mark_size(n, 64) for n in (1, 8, 16, 32, 33, 64)] == [8, 8, 4, 2, 1, 1]


def test_more_marked_canaries_than_pixels_are_refused(pool):
    with pytest.raises(ValueError, match="--canaries 65 marked canaries need a pixel each; the images have 64"):
        canary_arrays(pool, CanaryConfig(n=65, kind="marked"))


def test_mislabeled_canaries_are_pool_images_with_a_wrong_label(pool):
    config = CanaryConfig(n=200, kind="mislabeled", seed=3)
    x, y, source = canary_arrays(pool, config)
    assert x.shape == (200, *pool.image_shape) and len(np.unique(source)) == 200  # distinct pool images
    assert np.array_equal(x, pool.x[source])
    assert (y != pool.y[source]).all() and y.min() >= 0 and y.max() < pool.n_classes
    # the wrong label is uniform over the C - 1 others: every one of them occurs
    assert len(np.unique((y - pool.y[source]) % pool.n_classes)) == pool.n_classes - 1
    bigger = add_canaries(pool, config)
    assert bigger.n_pool == pool.n_pool + 200
    assert np.array_equal(bigger.x[: pool.n_pool], pool.x) and np.array_equal(bigger.y[: pool.n_pool], pool.y)
    assert np.array_equal(bigger.x[pool.n_pool :], x) and np.array_equal(bigger.y[pool.n_pool :], y)
    assert np.array_equal(bigger.x_test, pool.x_test) and np.array_equal(bigger.y_test, pool.y_test)
    again = make_pool(pool.name, bigger.x, bigger.y, pool.x_test, pool.y_test, pool.classes, pool.flip_ok)
    assert bigger.fingerprint == again.fingerprint != pool.fingerprint
    # the natural examples are normalised as without canaries
    assert bigger.mean == pool.mean and bigger.std == pool.std and again.mean != pool.mean
    # deterministic from the seed alone
    assert np.array_equal(canary_arrays(pool, config)[2], source)
    assert not np.array_equal(canary_arrays(pool, CanaryConfig(n=200, kind="mislabeled", seed=4))[2], source)
    assert add_canaries(pool, None) is pool and add_canaries(pool, CanaryConfig(n=0)) is pool


def test_outlier_canaries_are_noise_within_the_pixel_range(pool):
    x, y, source = canary_arrays(pool, CanaryConfig(n=100, kind="outlier", seed=0))
    low, high = pool.x.min(axis=(0, 2, 3)), pool.x.max(axis=(0, 2, 3))
    assert x.dtype == np.float32 and x.shape == (100, *pool.image_shape)
    assert (x >= low[None, :, None, None]).all() and (x <= high[None, :, None, None]).all()
    assert x.std() > 0.2 and len(np.unique(x)) > 1000  # i.i.d. noise, not images
    assert y.min() >= 0 and y.max() < pool.n_classes and (source == -1).all()


def test_duplicate_canaries_are_identical_rows_of_one_record_with_one_coin(pool):
    config = CanaryConfig(n=30, kind="duplicate", copies=3, seed=1)
    assert CanaryConfig(n=5, kind="duplicate").copies == 4  # the default
    x, y, source = canary_arrays(pool, config)
    assert x.shape[0] == 90 and len(np.unique(source)) == 30
    groups = x.reshape(30, 3, *pool.image_shape)
    assert (groups == groups[:, :1]).all() and np.array_equal(y, pool.y[source])  # true labels
    bigger = add_canaries(pool, config)
    record = record_of_row(pool.n_pool, config)
    assert record.shape == (pool.n_pool + 90,) and np.array_equal(record[: pool.n_pool], np.arange(pool.n_pool))
    assert np.array_equal(record[pool.n_pool :], pool.n_pool + np.repeat(np.arange(30), 3))
    assert canary_rows(pool.n_pool, config).sum() == 90
    assert first_rows(record).sum() == pool.n_pool + 30
    keep = membership_matrix(bigger.y, n_runs=12, master_seed=5, record_of_row=record)
    tied = keep[:, pool.n_pool :].reshape(12, 30, 3)
    assert (tied == tied[:, :, :1]).all()  # the three copies share their coin in every run
    assert 0 < tied[:, :, 0].mean() < 1


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"n": -1}, "--canaries -1"),
        ({"n": 2.5}, "--canaries 2.5"),
        ({"n": True}, "--canaries True"),
        ({"n": 3, "kind": "loud"}, "'loud'"),
        ({"n": 3, "kind": "duplicate", "copies": 1}, "--canary-copies 1"),
        ({"n": 3, "kind": "outlier", "copies": 3}, "--canary-copies 3"),
    ],
)
def test_bad_configurations_raise_one_line_naming_the_value(kwargs, named):
    with pytest.raises(ValueError) as info:
        CanaryConfig(**kwargs)
    assert named in str(info.value) and "\n" not in str(info.value)


def test_more_canaries_than_the_pool_holds_is_refused(pool):
    for kind in ("mislabeled", "outlier", "duplicate"):
        with pytest.raises(ValueError, match="--canaries 5000 is more than the pool's 1500 examples can hold"):
            add_canaries(pool, CanaryConfig(n=5000, kind=kind))
    # gradient canaries copy no image: their limit is the release's coordinates (victims.dp.whitebox_canaries)
    assert add_canaries(pool, CanaryConfig(n=5000, kind="gradient")).n_pool == 6500


def test_natural_coins_are_the_same_with_and_without_canaries(pool):
    plain = membership_matrix(pool.y, n_runs=6, master_seed=2)
    for config in (CanaryConfig(n=40), CanaryConfig(n=40, kind="duplicate", copies=5)):
        bigger = add_canaries(pool, config)
        keep = membership_matrix(bigger.y, n_runs=6, master_seed=2, record_of_row=record_of_row(pool.n_pool, config))
        assert keep.shape == (6, bigger.n_pool) and np.array_equal(keep[:, : pool.n_pool], plain)


def test_without_records_the_plan_is_bit_identical_to_earlier_versions(pool):
    keep = membership_matrix(pool.y, n_runs=4, master_seed=0)
    # keep.npy of `audit.lira --n-shadow 4 --seed 0` on digits, made before canaries existed
    assert hashlib.sha256(np.packbits(keep).tobytes()).hexdigest() == (
        "5e4b4224bae05c4c3c49d5abc1ef04a84ef5c59707833e68d82b3585737a9483"
    )
    own = membership_matrix(pool.y, n_runs=4, master_seed=0, record_of_row=np.arange(pool.n_pool))
    assert np.array_equal(own, keep)
    assert np.array_equal(keep[1], membership_row(pool.n_pool, master_seed=0, run=1))
    with pytest.raises(ValueError, match="record_of_row"):
        membership_matrix(pool.y, n_runs=2, master_seed=0, record_of_row=np.arange(pool.n_pool) + 1)


EXPERIMENT = {
    "victim": "real",
    "dataset": "digits",
    "dataset_fingerprint": "0123456789abcdef",
    "config": {"train": {"steps": 3}},
    "n_pool": 4,
    "master_seed": 0,
    "plan": "p",
    "inclusion_rate": 0.5,
    "package_version": "0.1.0",
}


def test_an_experiment_without_canaries_keeps_its_directory_name(tmp_path):
    # computed before canaries existed: every existing store keeps its name and opens unchanged
    assert experiment_id(EXPERIMENT) == "real-digits-ac3c63b35f"
    assert experiment_id({**EXPERIMENT, "canaries": None}) == "real-digits-ac3c63b35f"
    entry = CanaryConfig(n=2).entry(4)
    with_canaries = {**EXPERIMENT, "n_pool": 6, "canaries": entry}
    assert experiment_id(with_canaries) != experiment_id({**EXPERIMENT, "n_pool": 6})
    labels = np.array([0, 1, 0, 1])
    store = RunStore.open(tmp_path, experiment=EXPERIMENT, pool_labels=labels)
    assert RunStore.open(tmp_path, experiment=EXPERIMENT, pool_labels=labels).root == store.root
    other = RunStore.open(tmp_path, experiment=with_canaries, pool_labels=np.array([0, 1, 0, 1, 1, 0]))
    assert other.root != store.root and json.loads((other.root / "experiment.json").read_text())["canaries"] == entry


def test_attack_summary_scores_each_duplicate_record_once_and_bounds_no_epsilon():
    rng = np.random.default_rng(0)
    n_natural, n, copies, targets = 200, 20, 3, 2
    config = CanaryConfig(n=n, kind="duplicate", copies=copies)
    columns = CanaryColumns.of(n_natural, config)
    record, canaries = columns.record, columns.canary
    assert np.array_equal(record, record_of_row(n_natural, config)) and np.array_equal(
        canaries, canary_rows(n_natural, config)
    )
    assert not columns.single_rows and columns.scored.sum() == n
    membership = rng.random((targets, record.max() + 1)) < 0.5
    membership = membership[:, record]
    scores = rng.normal(size=membership.shape) + 2 * membership * canaries
    init = np.zeros_like(membership)
    summary = attack_summary(scores, membership, init, delta=0.0, confidence=0.95, seed=1, canaries=columns)
    assert summary["n_members"] + summary["n_nonmembers"] == targets * n  # one row per record
    assert summary["eps_lower"] is None and summary["eps_ceiling"] is None and summary["eps_hat"] >= 0
    assert summary["auc"] > 0.8
    natural = summary["natural"]
    assert natural["n_members"] + natural["n_nonmembers"] == targets * n_natural
    assert natural["eps_lower"] is not None and natural["eps_ceiling"] > 0
    # single-row canaries keep their bound; no canaries at all: the plain summary, no new keys
    single = CanaryConfig(n=n)
    plain = attack_summary(
        scores[:, : n_natural + n],
        membership[:, : n_natural + n],
        init[:, : n_natural + n],
        delta=0.0,
        confidence=0.95,
        seed=1,
        canaries=CanaryColumns.of(n_natural, single),
    )
    assert plain["eps_lower"] is not None and plain["n_members"] + plain["n_nonmembers"] == targets * n
    base = attack_summary(scores, membership, init, delta=0.0, confidence=0.95, seed=1)
    assert "natural" not in base and base == attack_summary(
        scores, membership, init, delta=0.0, confidence=0.95, seed=1, canaries=None
    )


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--canaries", "5", "--canary-kind", "loud"], "--canary-kind: invalid choice: 'loud'"),
        (["--canaries", "-1"], "--canaries: must be an integer >= 0, got '-1'"),
        (["--canaries", "2.5"], "--canaries: must be an integer >= 0, got '2.5'"),
        (["--canaries", "5000"], "--canaries 5000 is more than the pool's 1500 examples can hold"),
        (["--canaries", "5", "--canary-copies", "3"], "--canary-copies 3 applies to --canary-kind duplicate only"),
        (
            ["--canaries", "5", "--canary-kind", "duplicate", "--canary-copies", "1"],
            "--canary-copies: must be an integer >= 2",
        ),
        (["--canaries", "1"], "at least 2 of each"),  # 2 targets x 1 canary: never 2 IN and 2 OUT
    ],
)
def test_bad_canary_flags_exit_2_with_one_line_before_anything_is_written(tmp_path, capsys, flags, named):
    with pytest.raises(SystemExit) as exit_info:
        lira.main(["--runs-dir", str(tmp_path / "runs"), "--victim", "real", "--n-shadow", "4", *flags, *TINY])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and named in err, err
    assert not (tmp_path / "runs").exists()


def test_the_release_audit_rejects_canaries(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        release.main(
            [
                "--pool",
                str(tmp_path / "p.npz"),
                "--release",
                str(tmp_path / "r.npz"),
                "--victim",
                "subset",
                "--n-shadow",
                "4",
                "--runs-dir",
                str(tmp_path / "runs"),
                "--canaries",
                "5",
            ]
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "--canaries" in err, err
    assert not (tmp_path / "runs").exists()


def test_an_audit_with_mislabeled_canaries_reports_them_as_its_top_level(tmp_path, pool):
    from audit.claim import Claim
    from audit.reporting.build import Settings, build_report
    from audit.results import load_audited

    runs_dir = tmp_path / "runs"
    assert (
        lira.main(
            [
                "--runs-dir",
                str(runs_dir),
                "--victim",
                "real",
                "--n-shadow",
                "4",
                "--canaries",
                "50",
                "--canary-kind",
                "mislabeled",
                *TINY,
            ]
        )
        == 0
    )
    (root,) = [p for p in runs_dir.iterdir() if p.is_dir()]
    experiment = json.loads((root / "experiment.json").read_text())
    entry = {"n": 50, "kind": "mislabeled", "copies": None, "seed": 0, "first_row": 1500, "n_natural": 1500}
    assert experiment["canaries"] == entry and experiment["n_pool"] == 1550
    keep = np.load(root / "keep.npy")
    assert keep.shape == (4, 1550) and np.array_equal(
        keep[:, :1500], membership_matrix(pool.y, n_runs=4, master_seed=0)
    )

    summary = json.loads((root / "audit" / "summary.json").read_text())
    evaluation = summary["evaluation"]
    assert evaluation["n_canaries"] == 2 * 50 and evaluation["canaries"] == entry
    assert "canaries" in evaluation["epsilon_note"]
    for name, attack in summary["attacks"].items():
        # the top level is the 2 targets x 50 canary coins, the natural group the 2 x 1500 others
        assert attack["n_members"] == keep[:2, 1500:].sum() and attack["n_nonmembers"] == (~keep[:2, 1500:]).sum(), name
        assert 0 <= attack["eps_lower"] <= attack["eps_ceiling"]
        natural = attack["natural"]
        assert natural["n_members"] == keep[:2, :1500].sum() and natural["n_nonmembers"] == (~keep[:2, :1500]).sum()
        assert 0 <= natural["eps_lower"] <= natural["eps_ceiling"] and natural["eps_ceiling"] > attack["eps_ceiling"]
    with np.load(root / "audit" / "scores.npz") as z:
        assert z["membership"].shape == (2, 1550)

    # bad canary flags beside an existing store leave every file on disk as it was
    before = {p: p.read_bytes() for p in runs_dir.rglob("*") if p.is_file()}
    for flags in (["--canaries", "5000"], ["--canaries", "50", "--canary-kind", "outlier", "--canary-copies", "2"]):
        with pytest.raises(SystemExit):
            lira.main(["--runs-dir", str(runs_dir), "--victim", "real", "--n-shadow", "6", *flags, *TINY])
    assert {p: p.read_bytes() for p in runs_dir.rglob("*") if p.is_file()} == before

    built = build_report([load_audited(root)], settings=Settings(claim=Claim(epsilon=1.0), n_boot=10))
    (experiment_entry,) = built.data["experiments"]
    assert "inserted mislabeled canaries" in experiment_entry["verdicts"][0]["reason"]
    assert experiment_entry["claim"]["n_canaries"] == 100
    assert "Canaries vs natural examples: loss: AUC" in experiment_entry["protocol"]
    assert str(root) in built.risks  # thumbnails: the pool is rebuilt with its canaries

    # audit.compare reads the audit through its natural examples: their columns and bounds
    from audit.results import load_experiment

    from audit.stats.bootstrap import summarise_experiment

    exp = load_experiment(root).natural_examples()
    assert exp.membership.shape == (2, 1500) and np.array_equal(exp.membership, keep[:2, :1500])
    assert all(s.shape == (2, 1500) for s in exp.scores.values())
    assert exp.result.attacks["loss"]["eps_lower"] == summary["attacks"]["loss"]["natural"]["eps_lower"]
    estimate = summarise_experiment(load_experiment(root), attacks=["loss"], groups=["all"], n_boot=10, rng=0)
    assert estimate.estimates[("loss", "all")].metrics["auc"].point == pytest.approx(
        summary["attacks"]["loss"]["natural"]["auc"]
    )
