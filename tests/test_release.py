"""`python -m audit.release`: a custodian's own release of a random real subset, audited with tiny
shadow runs of the `subset` pipeline on the same pool; bad inputs refused before anything is written."""

import json

import numpy as np
import pytest

from audit import release
from victims import load_pool

TINY = ["--train-steps", "10", "--train-net-width", "8", "--executor", "inline", "--quiet"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """POOL.npz (digits with x_test, uint8-free floats, 3-d images) and RELEASE.npz: 2 member images per class."""
    root = tmp_path_factory.mktemp("release")
    pool = load_pool("digits")
    rng = np.random.default_rng(0)
    member = rng.random(pool.n_pool) < 0.5
    chosen = np.concatenate([rng.choice(np.flatnonzero(member & (pool.y == c)), 2, replace=False) for c in range(10)])
    arrays = {"x": pool.x[:, 0], "y": pool.y, "member": member, "x_test": pool.x_test[:, 0], "y_test": pool.y_test}
    np.savez(root / "pool.npz", **arrays)
    np.savez(root / "release.npz", x=pool.x[chosen], y=pool.y[chosen], init_idx=chosen)
    return root, arrays, chosen


def test_a_release_is_audited_against_the_users_membership(files, tmp_path):
    root, arrays, chosen = files
    out = tmp_path / "audit-out"
    argv = ["--pool", str(root / "pool.npz"), "--release", str(root / "release.npz"), "--victim", "subset",
            "--n-shadow", "4", "--runs-dir", str(tmp_path / "runs"), "--out", str(out), "--claimed-epsilon", "50",
            "--n-boot", "50", "--n-boot-eps", "10", *TINY]
    assert release.main(argv) == 0
    experiment = json.loads((out / "experiment.json").read_text())
    assert experiment["config"]["ipc"] == 2  # set from the release: 20 images over 10 classes
    summary = json.loads((out / "audit" / "summary.json").read_text())
    assert summary["target_runs"] == [0] and summary["n_shadow"] == 4 and summary["claimed_epsilon"] == 50
    with np.load(out / "audit" / "scores.npz") as z:
        assert np.array_equal(z["membership"][0], arrays["member"])  # the user's membership is the ground truth
        assert np.flatnonzero(z["init"][0]).tolist() == sorted(chosen.tolist())
        assert set(z.files) == {"target_runs", "membership", "init", "loss", "lira_online", "lira_offline", "dcr", "dcr_lira"}
        # dcr of a released real image is minus its distance to itself: 0, the highest score possible.
        assert np.all(z["dcr"][0, chosen] == 0) and z["dcr"][0].max() == 0
    for name in ("dcr", "loss"):
        assert summary["attacks"][name]["subgroups"]["init"]["n_members"] == 20
    # The released images themselves are found perfectly by dcr (distance 0, no non-member at 0).
    assert summary["attacks"]["dcr"]["subgroups"]["init"]["auc"] == 1.0
    data = json.loads((out / "audit" / "report.json").read_text())
    (entry,) = data["experiments"]
    assert entry["claim"]["source"] == "claimed" and entry["claim"]["epsilon"] == 50
    assert entry["verdicts"][0]["kind"] == "epsilon_consistent"
    assert (out / "audit" / "report.html").read_text().count("data:image/png;base64,") == 3  # ROC, release, risk
    # Rerun: the shadow runs are reused, the same numbers come out.
    shadow_runs = sorted((tmp_path / "runs").glob("subset-*/runs/*.npz"))
    mtimes = [p.stat().st_mtime_ns for p in shadow_runs]
    assert release.main(argv) == 0
    assert [p.stat().st_mtime_ns for p in shadow_runs] == mtimes
    assert json.loads((out / "audit" / "summary.json").read_text()) == summary


@pytest.mark.parametrize("case,named", [
    ("member_wrong_length", "'member' has shape (1499,)"),
    ("both_memberships", "exactly one of 'member'"),
    ("member_idx_out_of_range", "'member_idx' holds 1500"),
    ("release_larger_than_pool", "more than the pool's 1500"),
    ("release_label_out_of_range", "label 10 outside"),
    ("release_shape", "images (1, 4, 4) differ"),
    ("release_y_length", "'y' has shape (19,)"),
    ("uneven_classes", "images per class"),
    ("ipc_mismatch", "--ipc 3 does not match"),
    ("odd_shadows", "--n-shadow 3 must be even"),
    ("init_not_member", "not a member"),
    ("uint8_release", "same pixel scale"),
])
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
    elif case == "odd_shadows":
        extra = ["--n-shadow", "3"]
    elif case == "init_not_member":
        release_arrays["init_idx"] = np.flatnonzero(~arrays["member"])[:1]
    elif case == "uint8_release":
        release_arrays["x"] = (x * 255).astype(np.uint8)
    np.savez(tmp_path / "pool.npz", **pool_arrays)
    np.savez(tmp_path / "release.npz", **release_arrays)
    argv = ["--pool", str(tmp_path / "pool.npz"), "--release", str(tmp_path / "release.npz"), "--victim", "subset",
            "--n-shadow", "4", "--runs-dir", str(tmp_path / "runs"), *TINY, *extra]
    with pytest.raises(SystemExit) as exit_info:
        release.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and named in err, err
    assert not (tmp_path / "runs").exists()
