"""`python -m audit.release` for a table: the custodian's table (`--dataset fair`), its members
(`--members`) and a CSV release with the schema's columns; bad input refused before anything is
written; one audit of a release of real member records against tabular-subset's baseline."""

import json

import numpy as np
import pytest

from audit import release
from audit.releases.files import draw_membership
from audit.releases.inputs import ReleaseError
from audit.releases.table_inputs import read_table_inputs

pytest.importorskip("statsmodels")

MEMBERSHIP_SEED = 11
QUIET = ["--executor", "inline", "--quiet"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """members.npz (fair's pool rows drawn by recorded fair coins), members.csv (the same as
    member_idx) and release.csv: 300 member records in the schema's own values."""
    from victims import load_pool
    from victims.tabular.pools import member_table

    root = tmp_path_factory.mktemp("table-release")
    pool = load_pool("fair")
    member = draw_membership(pool.n_pool, seed=MEMBERSHIP_SEED)
    np.savez(
        root / "members.npz",
        member=member,
        membership_seed=np.int64(MEMBERSHIP_SEED),
        membership_rate=np.float64(0.5),
    )
    (root / "members.csv").write_text("member_idx\n" + "\n".join(map(str, np.flatnonzero(member))) + "\n")
    chosen = np.sort(np.random.default_rng(0).choice(np.flatnonzero(member), 300, replace=False))
    member_table(pool, chosen).to_csv(root / "release.csv", index=False)
    return root, pool, member, chosen


def test_a_csv_release_is_encoded_with_the_tables_schema(files):
    root, pool, member, chosen = files
    inputs = read_table_inputs("fair", root / "members.npz", root / "release.csv")
    assert inputs.pool.tabular and np.array_equal(inputs.member, member)
    assert inputs.coins.seed == MEMBERSHIP_SEED and inputs.coins.fair
    assert np.array_equal(inputs.release_x, pool.x[chosen]) and np.array_equal(inputs.release_y, pool.y[chosen])
    from_csv = read_table_inputs("fair", root / "members.csv", root / "release.csv")
    assert np.array_equal(from_csv.member, member) and from_csv.coins is None


def bad_release(root, tmp_path, case):
    """A copy of release.csv broken as `case` says; returns its path and the name the line must hold."""
    import pandas as pd

    frame = pd.read_csv(root / "release.csv")
    if case == "extra column":
        frame["zip_code"] = 12345
        named = "column 'zip_code' is not in the schema"
    elif case == "category":
        frame.loc[3, "religious"] = 7
        named = "column 'religious' holds 7, outside its public categories"
    elif case == "label":
        frame = frame.drop(columns="rate_marriage")
        named = "no label column 'rate_marriage'"
    else:  # a number outside the public bounds
        frame.loc[0, "affairs"] = 61.5
        named = "column 'affairs' holds 61.5, outside its public domain"
    path = tmp_path / "bad.csv"
    frame.to_csv(path, index=False)
    return path, named


@pytest.mark.parametrize("case", ["extra column", "category", "label", "bound"])
def test_a_bad_csv_release_exits_2_with_one_line_and_leaves_the_disk_untouched(files, tmp_path, capsys, case):
    root, *_ = files
    path, named = bad_release(root, tmp_path, case)
    runs_dir = tmp_path / "runs"
    (runs_dir / "earlier").mkdir(parents=True)
    (runs_dir / "earlier" / "kept.json").write_text('{"kept": true}')
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    argv = ["--dataset", "fair", "--members", str(root / "members.npz"), "--release", str(path)]
    with pytest.raises(SystemExit) as exit_info:
        release.main([*argv, "--victim", "tabular-subset", "--n-shadow", "4", "--runs-dir", str(runs_dir), *QUIET])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and named in err, err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in runs_dir.iterdir()) == ["earlier"]


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--victim", "subset"], "--victim subset releases images, and --dataset fair is a table"),
        (["--victim", "tabular-subset", "--rows", "10"], "--rows 10 does not match the release's 300 rows"),
        (["--victim", "tabular-subset", "--no-members"], "--members goes with --dataset"),
    ],
)
def test_flags_that_do_not_fit_a_table_exit_2_with_one_line(files, tmp_path, capsys, argv, named):
    root, *_ = files
    members = [] if "--no-members" in argv else ["--members", str(root / "members.npz")]
    argv = [a for a in argv if a != "--no-members"]
    with pytest.raises(SystemExit) as exit_info:
        release.main(
            ["--dataset", "fair", *members, "--release", str(root / "release.csv"), *argv, "--n-shadow", "4"]
            + ["--runs-dir", str(tmp_path / "runs"), *QUIET]
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and named in err, err
    assert not (tmp_path / "runs").exists()


def test_members_that_are_not_their_recorded_coins_are_refused(files, tmp_path):
    root, pool, member, _ = files
    flipped = member.copy()
    flipped[0] = ~flipped[0]
    np.savez(tmp_path / "m.npz", member=flipped, membership_seed=np.int64(MEMBERSHIP_SEED), membership_rate=0.5)
    with pytest.raises(ReleaseError, match=r"^--members .*m\.npz: the members are not the coins"):
        read_table_inputs("fair", tmp_path / "m.npz", root / "release.csv")


def test_a_release_of_fair_members_is_audited_against_tabular_subset(files, tmp_path, capsys):
    root, pool, member, chosen = files
    out = tmp_path / "audit-out"
    argv = ["--dataset", "fair", "--members", str(root / "members.npz"), "--release", str(root / "release.csv")]
    argv += ["--victim", "tabular-subset", "--n-shadow", "4", "--runs-dir", str(tmp_path / "runs"), "--out", str(out)]
    argv += ["--classifier-iterations", "10"]  # what is asserted is the audit's shape, not a figure: a small classifier
    assert release.main([*argv, *QUIET]) == 0
    printed = capsys.readouterr().out
    assert "random real subset" in printed and str(out / "audit" / "report.html") in printed
    experiment = json.loads((out / "experiment.json").read_text())
    assert experiment["victim"] == "tabular-subset" and experiment["config"]["rows"] == 300
    assert experiment["dataset"] == "fair" and experiment["members_file"].endswith("members.npz")
    summary = json.loads((out / "audit" / "summary.json").read_text())
    comparison = summary["subset_baseline"]
    assert comparison["n_subset_runs"] == 4 and comparison["subset_store"].split("/")[-1].startswith("tabular-subset")
    assert summary["release_leakage"]["strongest"] in summary["attacks"]
    with np.load(out / "audit" / "scores.npz") as z:
        assert np.array_equal(z["membership"][0], member)
    report = json.loads((out / "audit" / "report.json").read_text())
    assert report["experiments"][0]["release_audit"]
    assert (out / "audit" / "report.html").read_text().count("<img") >= 1  # the ROC curves; no record drawn as an image
