"""`python -m audit.release`: a custodian's own release of a random real subset, audited with tiny
shadow runs of the `subset` pipeline on the same pool; an ε verdict only for members drawn by
recorded fair coins; bad inputs refused before anything is written."""

import json

import numpy as np
import pytest

from audit import outputs, release
from audit.releases.files import draw_membership, write_pool, write_release
from audit.releases.inputs import Coins, read_inputs
from audit.stats.epsilon import unfair_coins_reason
from audit.summary import CHOSEN_NOTE
from victims import load_pool

TINY = ["--train-steps", "10", "--train-net-width", "8", "--executor", "inline", "--quiet"]
MEMBERSHIP_SEED = 11


def release_of(pool, member, rng):
    """2 member images per class, their pool rows."""
    return np.concatenate([rng.choice(np.flatnonzero(member & (pool.y == c)), 2, replace=False) for c in range(10)])


@pytest.fixture(scope="module")
def shadows(tmp_path_factory):
    """One --runs-dir for the module: every pool file here has the same x, y, x_test, so the shadow
    runs of `subset` --ipc 2 are trained once and reused."""
    return tmp_path_factory.mktemp("release-shadows")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """POOL.npz (digits with x_test, uint8-free floats, 3-d images), its members drawn by recorded fair
    coins, and RELEASE.npz: 2 member images per class."""
    root = tmp_path_factory.mktemp("release")
    pool = load_pool("digits")
    member = draw_membership(pool.n_pool, seed=MEMBERSHIP_SEED)
    chosen = release_of(pool, member, np.random.default_rng(0))
    arrays = {
        "x": pool.x[:, 0],
        "y": pool.y,
        "member": member,
        "x_test": pool.x_test[:, 0],
        "y_test": pool.y_test,
        "membership_rate": np.float64(0.5),
        "membership_seed": np.int64(MEMBERSHIP_SEED),
    }
    np.savez(root / "pool.npz", **arrays)
    np.savez(root / "release.npz", x=pool.x[chosen], y=pool.y[chosen], init_idx=chosen)
    return root, arrays, chosen


def test_a_release_is_audited_against_the_users_membership(files, shadows, tmp_path):
    root, arrays, chosen = files
    out = tmp_path / "audit-out"
    argv = [
        "--pool",
        str(root / "pool.npz"),
        "--release",
        str(root / "release.npz"),
        "--victim",
        "subset",
        "--n-shadow",
        "4",
        "--runs-dir",
        str(shadows),
        "--out",
        str(out),
        "--claimed-epsilon",
        "2",
        "--n-boot",
        "50",
        *TINY,
    ]
    assert release.main(argv) == 0
    experiment = json.loads((out / "experiment.json").read_text())
    assert experiment["config"]["ipc"] == 2  # set from the release: 20 images over 10 classes
    assert (experiment["plan"], experiment["membership_rate"], experiment["membership_seed"]) == (
        "independent-coins-v1",
        0.5,
        MEMBERSHIP_SEED,
    )
    summary = json.loads((out / "audit" / "summary.json").read_text())
    # any number of shadow runs (no pairs): all 4 are reference runs, the release is the one target
    assert summary["target_runs"] == [0] and summary["n_shadow"] == 4 and summary["claimed_epsilon"] == 2
    evaluation = summary["evaluation"]
    assert evaluation["n_canaries"] == 1500 and evaluation["membership"].startswith("independent fair coins")
    with np.load(out / "audit" / "scores.npz") as z:
        assert np.array_equal(z["membership"][0], arrays["member"])  # the user's membership is the ground truth
        assert np.flatnonzero(z["init"][0]).tolist() == sorted(chosen.tolist())
        assert set(z.files) == {
            "target_runs",
            "membership",
            "init",
            "loss",
            "lira_online",
            "lira_offline",
            "rmia",
            "rmia_offline",
            "dcr",
            "dcr_lira",
        }
        # dcr of a released real image is minus its distance to itself: 0, the highest score possible.
        assert np.all(z["dcr"][0, chosen] == 0) and z["dcr"][0].max() == 0
    for name in ("dcr", "loss"):
        assert summary["attacks"][name]["subgroups"]["init"]["n_members"] == 20
        assert 0 <= summary["attacks"][name]["eps_lower"] <= summary["attacks"][name]["eps_ceiling"]
    # The released images themselves are found perfectly by dcr (distance 0, no non-member at 0).
    assert summary["attacks"]["dcr"]["subgroups"]["init"]["auc"] == 1.0
    data = json.loads((out / "audit" / "report.json").read_text())
    (entry,) = data["experiments"]
    assert entry["claim"]["source"] == "claimed" and entry["claim"]["epsilon"] == 2
    assert entry["claim"]["n_canaries"] == 1500 and entry["claim"]["ceilings"]["dcr"] > 2
    # First how much it leaks, then the random subsets, then the claim: the 20 released members
    # found by dcr are far too few to exceed ε = 2.
    leakage, baseline, claim = entry["verdicts"]
    assert (leakage["kind"], claim["kind"]) == ("release_leakage", "epsilon_consistent")
    found = summary["release_leakage"]
    with np.load(out / "audit" / "scores.npz") as z:
        for fpr in ("0.01", "0.001"):  # the counts are the release's scores above the references' threshold
            flagged = found["release"][fpr]
            above = z[found["strongest"]][0] > flagged["threshold"]
            member = z["membership"][0]
            assert flagged["members_flagged"] == int((above & member).sum()) and flagged["members"] == member.sum()
            assert flagged["nonmembers_flagged"] == int((above & ~member).sum())
            assert f"{flagged['members_flagged']:,} of your {flagged['members']:,} members" in leakage["reason"]
    # The release is itself a random subset of the pool's members, made as the subset runs are:
    # with these seeds no difference is measured (the p-value is printed).
    comparison = summary["subset_baseline"]
    assert comparison["n_subset_runs"] == 4 and len(comparison["subset_tpr"]) == 4
    assert baseline["kind"] == "no_gain_over_subset", baseline
    assert baseline["text"] == "no measurable difference from a random real subset of the same size"
    assert "Student-t prediction test" in baseline["reason"] and comparison["p"] >= 0.05
    assert "the user's release" in entry["protocol"] and "reference runs" in entry["protocol"]
    page = (out / "audit" / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3  # ROC, release, risk
    assert "Your release (20 images" in page and "run 0" not in page and "over 1 runs" not in page
    # Rerun: the shadow runs are reused, the same numbers come out.
    shadow_runs = sorted(shadows.glob("subset-*/runs/*.npz"))
    mtimes = [p.stat().st_mtime_ns for p in shadow_runs]
    assert release.main(argv) == 0
    assert [p.stat().st_mtime_ns for p in shadow_runs] == mtimes
    assert json.loads((out / "audit" / "summary.json").read_text()) == summary


@pytest.mark.parametrize("drawn", ["brightest half", "coins of rate 0.3"])
def test_members_not_drawn_by_fair_coins_get_no_epsilon_verdict(files, shadows, tmp_path, capsys, drawn):
    # The brightest half of the pool is a member set chosen by a property of the images: an attack
    # that scores brightness separates members from non-members at ε = 0. Coins of rate 0.3 are
    # independent but not fair. Either way the numbers are descriptive and the report says why.
    root, arrays, _ = files
    pool = load_pool("digits")
    if drawn == "brightest half":
        brightness = pool.x.mean(axis=(1, 2, 3))
        member = brightness >= np.median(brightness)
        extra, note = {}, CHOSEN_NOTE
    else:
        member = draw_membership(pool.n_pool, seed=5, rate=0.3)
        extra, note = {"membership_rate": np.float64(0.3), "membership_seed": np.int64(5)}, unfair_coins_reason(0.3)
    chosen = release_of(pool, member, np.random.default_rng(1))
    pool_arrays = {k: v for k, v in arrays.items() if not k.startswith("membership_")}
    np.savez(tmp_path / "pool.npz", **{**pool_arrays, "member": member, **extra})
    np.savez(tmp_path / "release.npz", x=pool.x[chosen], y=pool.y[chosen], init_idx=chosen)
    out = tmp_path / "audit-out"
    argv = [
        "--pool",
        str(tmp_path / "pool.npz"),
        "--release",
        str(tmp_path / "release.npz"),
        "--victim",
        "subset",
        "--n-shadow",
        "3",
        "--runs-dir",
        str(shadows),
        "--out",
        str(out),
        "--claimed-epsilon",
        "2",
        "--n-boot",
        "50",
        *TINY,
    ]
    capsys.readouterr()
    assert release.main(argv) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "audit" / "summary.json").read_text())
    assert summary["evaluation"]["n_canaries"] is None and summary["evaluation"]["epsilon_note"] == note
    assert all(a["eps_lower"] is None and a["eps_ceiling"] is None for a in summary["attacks"].values())
    (entry,) = json.loads((out / "audit" / "report.json").read_text())["experiments"]
    leakage, _, verdict = entry["verdicts"]
    assert leakage["kind"] == "release_leakage" and f"No ε bound: {note}" in leakage["reason"]
    assert verdict["kind"] == "no_fair_coins"
    assert verdict["text"] == "no ε verdict: membership was not drawn by independent fair coins"
    assert verdict["reason"] == note and entry["claim"]["bounds"] is None
    if drawn == "brightest half":
        assert "would read as leakage even for a pipeline with ε = 0" in note
    assert note in (out / "audit" / "report.html").read_text()
    assert "no ε verdict: membership was not drawn by independent fair coins" in printed  # the verdict line
    described = outputs.describe(summary, out / "audit" / "summary.json")  # the console summary without --quiet
    assert "eps_lower n/a" in described and note in described


def test_a_test_split_held_out_of_a_coin_drawn_pool_does_not_depend_on_the_coins(tmp_path):
    # Without x_test, rows are held out without looking at the coins: the same rows for two
    # different coin draws; their non-members are the test split, their members leave the audit.
    pool = load_pool("digits")
    kept = []
    for seed in (1, 2):
        member = draw_membership(pool.n_pool, seed=seed)
        chosen = release_of(pool, member, np.random.default_rng(0))
        np.savez(
            tmp_path / "pool.npz", x=pool.x[:, 0], y=pool.y, member=member, membership_rate=0.5, membership_seed=seed
        )
        np.savez(tmp_path / "release.npz", x=pool.x[chosen], y=pool.y[chosen], init_idx=chosen)
        inputs = read_inputs(tmp_path / "pool.npz", tmp_path / "release.npz")
        held = np.setdiff1d(np.arange(pool.n_pool), inputs.pool_index)
        assert len(held) == 300  # 20% of 1500 rows, stratified by label
        assert len(inputs.pool.x_test) == int((~member[held]).sum())  # the held-out non-members are the test split
        assert np.array_equal(inputs.member, member[inputs.pool_index]) and inputs.coins == Coins(0.5, seed)
        # init rows held out leave the sub-group; the others map to their pool rows
        assert np.array_equal(np.sort(inputs.pool_index[inputs.init_idx]), np.intersect1d(chosen, inputs.pool_index))
        kept.append(inputs.pool_index)
    assert np.array_equal(*kept)
    # Without coins, only non-members are held out: no member is lost.
    np.savez(tmp_path / "pool.npz", x=pool.x[:, 0], y=pool.y, member=member)
    inputs = read_inputs(tmp_path / "pool.npz", tmp_path / "release.npz")
    assert inputs.coins is None and inputs.member.sum() == member.sum()


@pytest.mark.parametrize(
    "case,named",
    [
        ("member_wrong_length", "'member' has shape (1499,)"),
        ("both_memberships", "exactly one of 'member'"),
        ("member_idx_out_of_range", "'member_idx' holds 1500"),
        ("release_larger_than_pool", "more than the pool's 1500"),
        ("release_label_out_of_range", "label 10 outside"),
        ("release_shape", "images (1, 4, 4) differ"),
        ("release_y_length", "'y' has shape (19,)"),
        ("uneven_classes", "images per class"),
        ("ipc_mismatch", "--ipc 3 does not match"),
        ("coins_not_reproduced", "the members are not the coins of membership_seed 11 and membership_rate 0.5"),
        ("rate_without_seed", "'membership_rate' without 'membership_seed'"),
        ("bad_rate", "'membership_rate' must be one number strictly between 0 and 1"),
        ("seed_is_membership_seed", "--seed 11 is the pool's membership_seed"),
        ("init_not_member", "not a member"),
        ("uint8_release", "'x' is uint8 (0-255) but the pool's 'x' is float32"),
        ("float_release_of_255_scale", "reaches 255, but a float release of a uint8 pool is read on the 0-1 scale"),
        ("victim_releases_nothing", "--victim real trains no downstream model on a released data set"),
    ],
)
def test_bad_inputs_exit_2_with_one_line_before_anything_is_written(files, tmp_path, capsys, case, named):
    root, arrays, chosen = files
    pool = load_pool("digits")
    x, y = pool.x[chosen], pool.y[chosen]
    pool_arrays, release_arrays, extra = dict(arrays), {"x": x, "y": y}, []
    if case == "member_wrong_length":
        pool_arrays["member"] = arrays["member"][:-1]
    elif case == "both_memberships":
        pool_arrays["member_idx"] = np.flatnonzero(arrays["member"])
    elif case == "member_idx_out_of_range":
        del pool_arrays["member"]
        pool_arrays["member_idx"] = np.array([0, 1500])
    elif case == "release_larger_than_pool":
        release_arrays = {"x": np.zeros((1501, 8, 8), np.float32), "y": np.arange(1501) % 10}
    elif case == "release_label_out_of_range":
        release_arrays["y"] = np.where(np.arange(20) == 3, 10, y)
    elif case == "release_shape":
        release_arrays["x"] = x[:, :, :4, :4]
    elif case == "release_y_length":
        release_arrays["y"] = y[:-1]
    elif case == "uneven_classes":
        release_arrays["y"] = np.where(np.arange(20) == 0, 1, y)
    elif case == "ipc_mismatch":
        extra = ["--ipc", "3"]
    elif case == "coins_not_reproduced":
        pool_arrays["member"] = draw_membership(len(arrays["member"]), seed=MEMBERSHIP_SEED + 1)
    elif case == "rate_without_seed":
        del pool_arrays["membership_seed"]
    elif case == "bad_rate":
        pool_arrays["membership_rate"] = np.float64(1.0)
    elif case == "seed_is_membership_seed":
        extra = ["--seed", str(MEMBERSHIP_SEED)]
    elif case == "init_not_member":
        release_arrays["init_idx"] = np.flatnonzero(~arrays["member"])[:1]
    elif case == "uint8_release":
        release_arrays["x"] = (x * 255).astype(np.uint8)
    elif case == "float_release_of_255_scale":
        pool_arrays["x"] = np.round(arrays["x"] * 255).astype(np.uint8)
        release_arrays["x"] = np.round(x * 255)
    elif case == "victim_releases_nothing":
        extra = ["--victim", "real"]
    np.savez(tmp_path / "pool.npz", **pool_arrays)
    np.savez(tmp_path / "release.npz", **release_arrays)
    argv = [
        "--pool",
        str(tmp_path / "pool.npz"),
        "--release",
        str(tmp_path / "release.npz"),
        "--victim",
        "subset",
        "--n-shadow",
        "4",
        "--runs-dir",
        str(tmp_path / "runs"),
        *TINY,
        *extra,
    ]
    with pytest.raises(SystemExit) as exit_info:
        release.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and named in err, err
    assert not (tmp_path / "runs").exists()


def test_a_float_release_of_a_uint8_pool_is_read_on_the_unit_scale_unclipped(tmp_path):
    # A DM release has pixels outside [0, 1]; the pool is uint8. The release is read as it is
    # (0-1 scale, uint8 / 255 for the pool): nothing clipped, nothing rounded.
    pool = load_pool("digits")
    member = draw_membership(pool.n_pool, seed=3)
    x8 = np.round(pool.x[:, 0] * 255).astype(np.uint8)
    release_x = np.linspace(-0.75, 1.75, 20 * 64, dtype=np.float32).reshape(20, 8, 8)
    write_pool(tmp_path / "pool.npz", x8, pool.y, member=member, membership_seed=3)
    write_release(tmp_path / "release.npz", release_x, np.arange(20) % 10)
    inputs = read_inputs(tmp_path / "pool.npz", tmp_path / "release.npz")
    assert np.array_equal(inputs.release_x[:, 0], release_x)  # -0.75 and 1.75 kept
    assert np.allclose(inputs.pool.x[:, 0], x8[inputs.pool_index] / 255)


def test_the_file_helpers_refuse_what_the_audit_would_refuse(tmp_path):
    pool = load_pool("digits")
    member = draw_membership(pool.n_pool, seed=3)
    with pytest.raises(ValueError, match="the members are not the coins of membership_seed 4"):
        write_pool(tmp_path / "pool.npz", pool.x, pool.y, member=member, membership_seed=4)
    with pytest.raises(ValueError, match="'member' has shape"):
        write_pool(tmp_path / "pool.npz", pool.x, pool.y, member=member[:-1])
    assert not (tmp_path / "pool.npz").exists()
