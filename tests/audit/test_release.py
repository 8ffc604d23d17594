"""`python -m audit.release`: a custodian's own release of a random real subset, audited with tiny
shadow runs of the `subset` pipeline on the same pool; an ε verdict only for members drawn by
recorded fair coins; bad inputs refused before anything is written."""

import json

import numpy as np
import pytest
from scipy.stats import hypergeom

from audit import outputs, release
from audit.cli.release_command import verdict_line
from audit.releases.files import draw_membership, write_pool, write_release
from audit.releases.inputs import Coins, read_inputs
from audit.stats.epsilon import unfair_coins_reason
from audit.api import reread
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
    # 1,500 audit-pool examples at inclusion rate 0.5: 750 reference non-member scores per run. 1 in
    # 100 needs 10 / 0.01 = 1,000 of them (2 runs), 1 in 1,000 needs 10,000 (ceil(13.3) = 14 runs),
    # the LiRA-style attacks' choice 4 runs: 4 runs fall short for 1 in 1,000 only.
    assert found["runs_needed"] == {"0.01": 2, "0.001": 14, "attack_choice": 4}
    assert len(found["warnings"]) == 1 and found["warnings"][0].startswith("--n-shadow 4 is too few for the 1 in 1,000")
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
    result = reread(summary)
    described = outputs.describe(result, out / "audit" / "summary.json")  # the console summary without --quiet
    assert "eps_lower n/a" in described and note in described


def audit_argv(pool_file, release_file, n_shadow, shadows, out):
    return [
        "--pool",
        str(pool_file),
        "--release",
        str(release_file),
        "--victim",
        "subset",
        "--n-shadow",
        str(n_shadow),
        "--runs-dir",
        str(shadows),
        "--out",
        str(out),
        *TINY,
    ]


def test_too_few_runs_are_warned_of_and_a_skipped_comparison_says_why(files, shadows, tmp_path, capsys):
    root, _, _ = files
    out = tmp_path / "audit-out"
    capsys.readouterr()
    assert release.main(audit_argv(root / "pool.npz", root / "release.npz", 2, shadows, out)) == 0
    printed = capsys.readouterr()
    found = json.loads((out / "audit" / "summary.json").read_text())["release_leakage"]
    # 1,500 audit-pool examples, coins of rate 0.5: 750 non-member scores per reference run, 1,500 from
    # 2 runs. 1 in 100 needs 10 / 0.01 = 1,000 (2 runs: enough); 1 in 1,000 needs 10 / 0.001 = 10,000,
    # ceil(10,000 / 750) = 14 runs. Each of the 2 runs is a pseudo-target against the other 1, where
    # lira_online, lira_offline and dcr_lira need 4 runs (a target and 3 references).
    warnings = [
        "--n-shadow 2 is too few for the 1 in 1,000 figure: its threshold is set on about 1,500 reference "
        "non-member scores (750 per run: 1,500 examples at inclusion rate 0.5), and pinning its rate takes 10,000 (10 "
        "expected above it); 14 runs would do",
        "--n-shadow 2 is too few to choose the strongest attack: each reference run is scored against the other "
        "1, and lira_online, lira_offline, dcr_lira need 4 runs; 4 runs would do",
    ]
    assert found["runs_needed"] == {"0.01": 2, "0.001": 14, "attack_choice": 4}
    assert found["warnings"] == warnings
    assert printed.err.splitlines() == [f"warning: {w}" for w in warnings]  # printed although --quiet
    # the pooled non-member scores the thresholds were set on: about 2 x 750
    assert abs(found["reference_nonmembers"] - 1500) < 100
    # The comparison needs 4 subset runs: the verdict line says so, with the reason report.json holds.
    (_, baseline) = json.loads((out / "audit" / "report.json").read_text())["experiments"][0]["verdicts"]
    reason = (
        "--n-shadow 2 leaves too few subset runs for the comparison (each is judged against the others: at least 4)"
    )
    assert baseline["kind"] == "no_subset_baseline" and baseline["reason"] == reason
    verdict_line = printed.out.splitlines()[0]
    assert verdict_line.endswith(f"; not compared with a random real subset of the same size: {reason}")


def test_the_verdict_line_gives_the_reason_a_comparison_was_skipped():
    verdicts = [
        {"kind": "release_leakage", "text": "an attacker ... finds 3.0% of your members", "reason": "counts"},
        {"kind": "no_subset_baseline", "text": "not compared with a random real subset", "reason": "too few runs"},
        {"kind": "epsilon_consistent", "text": "leakage consistent with the claimed ε", "reason": "bounds"},
    ]
    assert verdict_line(verdicts) == (
        "an attacker ... finds 3.0% of your members; not compared with a random real subset: too few runs; "
        "leakage consistent with the claimed ε"
    )


def test_a_release_of_non_members_is_no_better_than_guessing(files, shadows, tmp_path, capsys):
    # 2 non-members' images per class: the strongest attack flags those and their look-alikes, more
    # of the non-members than of the members at both rates, so neither figure is above guessing,
    # whatever TPR it reads (a one-sided Fisher exact test of the two counts, p >= 0.05).
    root, arrays, _ = files
    capsys.readouterr()
    pool = load_pool("digits")
    rng = np.random.default_rng(0)
    outside = np.concatenate(
        [rng.choice(np.flatnonzero(~arrays["member"] & (pool.y == c)), 2, replace=False) for c in range(10)]
    )
    write_release(tmp_path / "release.npz", pool.x[outside], pool.y[outside])
    out = tmp_path / "audit-out"
    assert release.main(audit_argv(root / "pool.npz", tmp_path / "release.npz", 2, shadows, out)) == 0
    found = json.loads((out / "audit" / "summary.json").read_text())["release_leakage"]
    assert found["at_chance"] == ["0.01", "0.001"] and found["alpha"] == 0.05
    assert found["guessing_test"].startswith("one-sided Fisher exact test")
    for f in found["release"].values():
        assert f["realised_fpr"] > f["tpr"] and f["p_guessing"] > 0.5
        m, n, x, y = f["members"], f["nonmembers"], f["members_flagged"], f["nonmembers_flagged"]
        assert f["p_guessing"] == pytest.approx(hypergeom.sf(x - 1, m + n, x + y, m), rel=1e-12)
    # The verdict says so in plain words, in report.json and in the terminal; the warnings end its reason.
    leakage = json.loads((out / "audit" / "report.json").read_text())["experiments"][0]["verdicts"][0]
    assert leakage["text"].startswith("an attacker who wrongly flags 1 in 1,000 non-members finds")
    assert leakage["text"].endswith("%): no better than guessing at 1 in 1,000 or 1 in 100")
    assert "At 1 in 1,000 or 1 in 100 it is no better than guessing" in leakage["reason"]
    assert leakage["reason"].endswith(f" Warning: {found['warnings'][-1]}.")
    assert capsys.readouterr().out.startswith(leakage["text"] + "; not compared with a random real subset")


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
        (
            "flat_release",
            "'x' has shape (20, 64), not images: expected (20, 1, 8, 8) or (20, 8, 8), the pool's image shape "
            "(1, 8, 8); if each row is one flattened image, x.reshape(20, 1, 8, 8)",
        ),
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
    elif case == "flat_release":
        release_arrays["x"] = x.reshape(20, 64)
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


def test_an_out_holding_another_release_audit_is_refused_naming_the_nested_key(tmp_path):
    from audit.releases.inputs import ReleaseError
    from audit.releases.target import check_out_dir

    record = {"victim": "dm", "config": {"ipc": 10, "train": {"steps": 300}}, "n_shadow": 16}
    (tmp_path / "experiment.json").write_text(json.dumps(record))
    before = (tmp_path / "experiment.json").read_bytes()
    check_out_dir(tmp_path, record)  # the same audit: kept
    with pytest.raises(ReleaseError) as refused:
        check_out_dir(tmp_path, {**record, "config": {"ipc": 10, "train": {"steps": 30}}})
    assert str(refused.value) == (
        f"--out {tmp_path} holds another release audit (stored -> asked: config.train.steps: 300 -> 30); "
        f"refusing to overwrite it: pass another --out, or move {tmp_path} away"
    )
    assert (tmp_path / "experiment.json").read_bytes() == before and len(list(tmp_path.iterdir())) == 1
