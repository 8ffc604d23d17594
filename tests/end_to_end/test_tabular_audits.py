"""End-to-end audits of the tabular victims on the embedded fair table through the CLI
(`python -m audit.lira`): each victim, each table attack, each canary kind of a table, white-box
with the marginals' gradient canaries, and the two bugs of the catalogue."""

import json
from html import escape

import numpy as np
import pytest

from audit import lira, report

SMALL = ["--rows", "300", "--classifier-iterations", "10"]
TABLE_ATTACKS = ("dcr", "dcr_lira", "domias", "queries", "support", "pairs", "support_cal", "queries_cal")
MODEL_ATTACKS = ("loss", "lira_online", "lira_offline", "rmia", "rmia_offline")


def audited(runs_dir, *flags) -> dict:
    argv = ["--dataset", "fair", "--runs-dir", str(runs_dir), "--executor", "inline", "--quiet", *flags]
    assert lira.main(argv) == 0
    (root,) = [p for p in runs_dir.iterdir() if p.is_dir()]
    return json.loads((root / "audit" / "summary.json").read_text())


@pytest.mark.parametrize(
    "victim",
    [
        ["--victim", "marginals", "--epsilon", "1"],
        # the public tree: one estimation program for every run, compiled once by JAX (a private tree differs per
        # run, and compiling mbi's program for each was nearly all of this test's time); the private selection's
        # release is tests/victims/test_tabular_synths.py's, and the CLI path it takes here is the same
        pytest.param(
            ["--victim", "mst", "--epsilon", "1", "--iterations", "100", "--selection", "public"],
            marks=pytest.mark.slow,
        ),
        pytest.param(["--victim", "ctgan", "--epochs", "2"], marks=pytest.mark.slow),
    ],
    ids=["marginals", "mst", "ctgan"],
)
@pytest.mark.parametrize("kind", ["unseen", "extreme"])
def test_every_tabular_victim_is_audited_with_every_attack_and_canary_kind(tmp_path, victim, kind):
    summary = audited(tmp_path, *victim, *SMALL, "--n-shadow", "4", "--canaries", "4", "--canary-kind", kind)
    assert set(summary["attacks"]) == {*MODEL_ATTACKS, *TABLE_ATTACKS}
    assert summary["evaluation"]["n_canaries"] == 2 * 4  # 2 targets x 4 canaries; the natural records apart
    assert all("natural" in entry for entry in summary["attacks"].values())
    assert 0.0 <= summary["utility"]["marginal_tv_2way"] <= 1.0 and 0.0 <= summary["utility"]["test_auroc"] <= 1.0
    if victim[1] == "ctgan":
        assert summary["formal_epsilon"] is None
    else:
        assert summary["formal_epsilon"] == pytest.approx(1.0, abs=1e-6) and summary["delta"] == 1e-5


def test_unheld_canaries_on_the_unheld_pool_are_audited_with_every_attack(tmp_path):
    summary = audited(
        tmp_path, "--victim", "marginals", "--epsilon", "1", *SMALL, "--n-shadow", "4", "--pool-unheld", "1",
        "--canaries", "5", "--canary-kind", "unheld", "--verdict-attack", "pairs",
    )  # fmt: skip
    assert set(summary["attacks"]) == {*MODEL_ATTACKS, *TABLE_ATTACKS}
    assert summary["evaluation"]["n_canaries"] == 2 * 5
    (store,) = [p.name for p in tmp_path.iterdir() if p.is_dir()]
    assert store.startswith("marginals-fair-unheld-1-")
    # a canary alone on its 8 (label, feature) pairs: pairs scores every canary, IN or OUT, from those cells
    assert summary["attacks"]["pairs"]["eps_lower"] is not None
    # the verdict and the own curve rest on the attack declared before the audit, whatever the references say
    assert summary["evaluation"]["verdict_attack"] == "pairs"
    verdict = summary["verdict"]
    assert verdict["attack"] == verdict["mechanism"]["attack"] == "pairs"
    assert verdict["chosen_by"] in ("declared", "fixed")


def test_more_unheld_canaries_than_the_pool_s_empty_cells_hold_exit_2_with_one_line(tmp_path, capsys):
    # fair's pool leaves 4 bins of affairs empty (and no cell of another feature): 5 labels x 4 = 20 canaries at most
    argv = ["--dataset", "fair", "--runs-dir", str(tmp_path / "runs"), "--executor", "inline", "--victim", "marginals"]
    with pytest.raises(SystemExit) as e:
        lira.main([*argv, "--n-shadow", "4", "--canaries", "21", "--canary-kind", "unheld"])
    assert e.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        "python -m audit.lira: error: --canaries 21 unheld canaries need as many that share no empty (label, "
        "feature) cell; the pool leaves 4 cells of a feature empty (5 labels: at most 20)"
    )
    assert not (tmp_path / "runs").exists()


def test_marginals_white_box_with_gradient_canaries_tests_the_own_curve(tmp_path):
    # 200 gradient canaries (cells of their own), 4 runs at epsilon 4: the white-box attacks score them and
    # the own curve of 17 Gaussian steps at rate 1 is tested, not rejected (the mechanism is exact)
    summary = audited(
        tmp_path, "--victim", "marginals", "--epsilon", "4", *SMALL, "--n-shadow", "4", "--threat-model", "white-box",
        "--canaries", "200",
    )  # fmt: skip
    assert {"whitebox", "whitebox_sum", "whitebox_steps"} <= set(summary["attacks"])
    own = summary["verdict"]["mechanism"]
    assert own["claimed"] == {"noise_multiplier": pytest.approx(4.4577, abs=1e-3), "sample_rate": 1.0, "steps": 17}
    assert not own["rejected"]
    assert summary["attacks"]["whitebox"]["auc"] > 0.6  # mu = 0.925 per canary: AUC Phi(mu / sqrt 2) = 0.74


def test_the_noise_bug_is_violated_white_box_and_its_domain_twin_opens_the_extreme_canarys_domain(tmp_path):
    # sigma for 10 x the claim: 1,000 gradient canaries over 4 runs (2,000 coins) see it (measured: eps >= 3.9)
    summary = audited(
        tmp_path / "ten", "--victim", "victims.bugs:MarginalsNoiseForTen", "--epsilon", "1", *SMALL,
        "--n-shadow", "4", "--threat-model", "white-box", "--canaries", "1000",
    )  # fmt: skip
    assert summary["verdict"]["eps_lower"] > 1.0 and summary["verdict"]["mechanism"]["rejected"]
    # the domain read from the members: the one extreme canary (affairs at 60, beyond every fair record's 57.6)
    # opens a part of the domain only when it is in, and the support attack counts the records released there
    summary = audited(
        tmp_path / "domain", "--victim", "victims.bugs:MarginalsDomainFromData", "--epsilon", "1", *SMALL,
        "--n-shadow", "8", "--canaries", "1", "--canary-kind", "extreme",
    )  # fmt: skip
    (root,) = [p for p in (tmp_path / "domain").iterdir() if p.is_dir()]
    scores = np.load(root / "audit" / "scores.npz")
    coins, support = scores["membership"][:, -1], scores["support"][:, -1]
    assert (support[~coins] == 0).all()  # never a record there when the canary is out


def test_the_verdict_line_is_one_decision_naming_the_own_curve_where_the_epsilon_test_finds_nothing(tmp_path, capsys):
    # Issue 55's case, on the noise bug (σ for 10 x the claim, 17 Gaussian steps) against a claimed ε of 4:
    # 200 gradient canaries x 2 targets, white-box. The runs record a mechanism, so the ε test and the own
    # curve's run at 97.5% each. Measured: the ε test's bound 3.28, below the claim and the ceiling 4.68
    # ("consistent" on its own); the claimed G_0.268 is rejected. One decision: violated, by the own curve.
    flags = ["--victim", "victims.bugs:MarginalsNoiseForTen", "--epsilon", "1", "--claimed-epsilon", "4"]
    flags += ["--rows", "100", "--classifier-iterations", "1", "--n-shadow", "4", "--threat-model", "white-box"]
    summary = audited(tmp_path / "runs", *flags, "--canaries", "200")
    verdict = summary["verdict"]
    assert (
        verdict["levels"] == {"eps_verdict": 0.975, "own_curve": 0.975} and verdict["mechanism"]["confidence"] == 0.975
    )
    assert verdict["eps_lower"] <= 4 < verdict["eps_ceiling"] and verdict["mechanism"]["rejected"]
    assert verdict["kind"] == "epsilon_violated" and verdict["rejected_by"] == ["own_curve"]
    assert verdict["text"] == "claim violated at 95% confidence, by the own curve's test"
    lines = capsys.readouterr().out.splitlines()
    said = next(i for i, line in enumerate(lines) if line.startswith("  verdict: "))
    assert lines[said].startswith(f"  verdict: claimed ε = 4 at δ = 1e-05: {verdict['text']}; ")
    assert lines[said + 2].startswith("  own curve: ") and "REJECTED" in lines[said + 2]  # below it, no contradiction
    # the report says the same one decision, re-read from the store
    (store,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    assert report.main([str(store), "--n-boot", "200"]) == 0
    (entry,) = json.loads((store / "audit" / "report.json").read_text())["experiments"]
    assert (entry["verdicts"][0]["text"], entry["verdicts"][0]["rejected_by"]) == (verdict["text"], ["own_curve"])
    assert escape(verdict["text"]) in (store / "audit" / "report.html").read_text()
