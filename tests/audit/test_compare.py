"""Tests for audit.compare: exactness against audit.stats.metrics, calibration of the bootstrap on
simulated experiments, hand cases of the tests, and the command line."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from audit.cli.compare_command import main
from audit.reporting.comparison_tables import markdown_table
from audit.results import Experiment, ExperimentError, experiment_labels, load_experiment
from audit.stats.bootstrap import resampled_metrics, summarise_experiment, target_weights
from audit.stats.significance import bootstrap_difference, compare, compare_experiments, holm, welch_test
from audit.stats.epsilon import epsilon_ceiling, epsilon_lower_bound
from audit.stats.metrics import MembershipScores, auc, tpr_at_fpr
from audit.result import AuditResult
from shadow_runs.plan import PLAN

ROOT = Path(__file__).resolve().parents[2]


# -- fake experiments ---------------------------------------------------------------------------
def fake_experiment(
    seed,
    *,
    n_targets=8,
    n=200,
    shift=0.0,
    init_per_target=0,
    init_shift=0.0,
    attacks=("loss",),
    accuracy=0.9,
    n_runs=16,
    victim="subset",
    config=None,
    name=None,
):
    """Scores N(0, 1) for non-members, N(shift, 1) for members (+ init_shift for init members);
    each target's members are a random half of its n examples."""
    rng = np.random.default_rng(seed)
    membership = np.zeros((n_targets, n), dtype=bool)
    init = np.zeros((n_targets, n), dtype=bool)
    for t in range(n_targets):
        membership[t, rng.permutation(n)[: n // 2]] = True
        init[t, rng.choice(np.flatnonzero(membership[t]), init_per_target, replace=False)] = True
    scores = {a: rng.normal(size=(n_targets, n)) + shift * membership + init_shift * init for a in attacks}
    summary = {
        "victim": victim,
        "dataset": "digits",
        "config": config or {"ipc": 10},
        "delta": None,
        "evaluation": {"confidence": 0.95},
    }
    return Experiment(
        path=Path(name or f"{victim}-digits-{seed}"),
        result=AuditResult.from_json(summary),
        membership=membership,
        init=init,
        scores=scores,
        test_accuracy=accuracy + 0.01 * rng.normal(size=n_runs),
    )


def write_experiment(root: Path, exp: Experiment, *, plan: str = PLAN) -> Path:
    """The files the audit CLI leaves, summary.json computed as audit.evaluate computes it: the
    targets are the first runs 0..T-1, sub-groups carry no ε."""
    where = root / exp.path.name
    (where / "audit").mkdir(parents=True)
    (where / "runs").mkdir()
    attacks = {}
    for attack, s in exp.scores.items():
        nonmember = s[~exp.membership]
        entry = MembershipScores(s[exp.membership], nonmember).summary(rng=1)
        masks = {k: m for k, m in exp.group_masks().items() if k != "all"}
        if masks:
            entry["subgroups"] = {
                k: MembershipScores(s[m], nonmember).summary(rng=2, epsilon=False) for k, m in masks.items()
            }
        attacks[attack] = entry
    (where / "experiment.json").write_text(json.dumps({"victim": exp.victim, "plan": plan, "inclusion_rate": 0.5}))
    summary = {**exp.result.to_json(), "target_runs": list(range(exp.n_targets)), "attacks": attacks}
    (where / "audit" / "summary.json").write_text(json.dumps(summary))
    np.savez(
        where / "audit" / "scores.npz",
        target_runs=np.array(summary["target_runs"]),
        membership=exp.membership,
        init=exp.init,
        **exp.scores,
    )
    for r, accuracy in enumerate(exp.test_accuracy):
        (where / "runs" / f"{r:05d}.json").write_text(json.dumps({"seed": r, "test_accuracy": float(accuracy)}))
    return where


FAST = {"n_boot": 200, "n_boot_eps": 5}


# -- point estimates and the fast bootstrap -----------------------------------------------------
def test_point_estimates_are_audit_metrics_on_pooled_scores(tmp_path):
    exp = load_experiment(
        write_experiment(
            tmp_path, fake_experiment(0, shift=0.5, init_per_target=10, init_shift=2.0, attacks=("loss", "lira"))
        )
    )
    summary = summarise_experiment(exp, rng=0, **FAST)
    assert set(summary.estimates) == {(a, g) for a in ("loss", "lira") for g in ("all", "init", "other_members")}
    written = json.loads((tmp_path / exp.path.name / "audit" / "summary.json").read_text())
    masks = {"all": exp.membership, "init": exp.membership & exp.init, "other_members": exp.membership & ~exp.init}
    for (attack, group), estimate in summary.estimates.items():
        s = exp.scores[attack]
        member, nonmember = s[masks[group]], s[~exp.membership]  # pooled over targets, as summary.json
        assert estimate.metrics["auc"].point == auc(member, nonmember)
        assert estimate.metrics["tpr_at_fpr_0.01"].point == tpr_at_fpr(member, nonmember, 0.01)[0]
        assert estimate.metrics["tpr_at_fpr_0.001"].point == tpr_at_fpr(member, nonmember, 0.001)[0]
        entry = written["attacks"][attack] if group == "all" else written["attacks"][attack]["subgroups"][group]
        assert estimate.metrics["auc"].point == entry["auc"]
        if group == "all":
            assert estimate.metrics["eps_lower"].point == entry["eps_lower"]  # the audit's own number
            assert estimate.eps_ceiling == entry["eps_ceiling"] == epsilon_ceiling(member.size + nonmember.size)
            assert estimate.replicates["eps_lower"].shape == (FAST["n_boot_eps"],)
        else:  # a sub-group the mechanism picked: leakage statistics, no ε
            assert "eps_lower" not in estimate.metrics and estimate.eps_ceiling is None
        assert (estimate.n_members, estimate.n_nonmembers) == (member.size, nonmember.size)


def test_resampled_metrics_equal_audit_metrics_on_explicit_resamples():
    rng = np.random.default_rng(1)
    n_targets, n = 6, 300
    membership = rng.random((n_targets, n)) < 0.5
    scores = np.round(rng.normal(size=(n_targets, n)) + 0.4 * membership, 1)  # many ties
    picks = rng.integers(n_targets, size=(25, n_targets))
    fast = resampled_metrics(scores, membership, ~membership, target_weights(picks, n_targets))
    for b, pick in enumerate(picks):
        member = np.concatenate([scores[t][membership[t]] for t in pick])
        nonmember = np.concatenate([scores[t][~membership[t]] for t in pick])
        assert fast["auc"][b] == auc(member, nonmember)
        assert fast["tpr_at_fpr_0.01"][b] == tpr_at_fpr(member, nonmember, 0.01)[0]
        assert fast["tpr_at_fpr_0.001"][b] == tpr_at_fpr(member, nonmember, 0.001)[0]


def test_single_target_interval_collapses_to_the_point():
    # With T = 1 every bootstrap draw is that one target, so every replicate is the pooled
    # scores themselves and the percentile interval is [point, point]; the fast replicates
    # count the same integers as audit.stats.metrics, so the equality is exact. (eps_lower's
    # interval does not collapse: each replicate draws a new random split.)
    summary = summarise_experiment(fake_experiment(2, n_targets=1, shift=0.5), rng=0, **FAST)
    for metric in ("auc", "tpr_at_fpr_0.01", "tpr_at_fpr_0.001"):
        interval = summary.estimates[("loss", "all")].metrics[metric]
        assert interval.low == interval.point == interval.high


# -- calibration on simulated experiments -------------------------------------------------------
def test_same_distribution_rarely_flagged():
    # Both sides draw from the same distribution, so every flag is a false positive. A 5% test
    # would flag ~2 of 40; the cluster bootstrap with 16 targets underestimates the variance by
    # (T-1)/T, so the raw rate is a little higher (measured: 6.3% of 300 repetitions); Holm over
    # the 5 tests of each comparison only lowers the flagged rate. Allowed: 4 of 40 flagged (10%)
    # and 6 of 40 raw p < 0.05 (15%); at a true rate of 6.3% each bound fails by chance with
    # probability < 2%.
    flagged = raw = 0
    for rep in range(40):
        sides = [
            summarise_experiment(
                fake_experiment(1000 * rep + k, n_targets=16, n=100, shift=0.3), rng=rep, n_boot=400, n_boot_eps=0
            )
            for k in (0, 1)
        ]
        test = compare(*sides).get("auc", "loss", "all")
        flagged += test.significant
        raw += test.p_value < 0.05
    assert flagged <= 4
    assert raw <= 6


def test_clearly_stronger_victim_is_flagged():
    victim = summarise_experiment(fake_experiment(3, shift=1.0), rng=0, **FAST)
    baseline = summarise_experiment(fake_experiment(4, shift=0.0), rng=1, **FAST)
    comparison = compare(victim, baseline)
    test = comparison.get("auc", "loss", "all")
    # true difference Phi(1/sqrt(2)) - 1/2 = 0.26
    assert test.significant and test.p_adjusted < 0.05
    assert 0 < test.difference.low < test.difference.point < test.difference.high
    assert test.difference.point == pytest.approx(stats.norm.cdf(1 / math.sqrt(2)) - 0.5, abs=0.05)
    assert len(comparison.tests) == 5  # test accuracy + 4 metrics of (loss, all): one Holm family
    # Without eps_lower replicates (the default) eps_lower is a point only and is not tested.
    fast = [
        summarise_experiment(fake_experiment(k, shift=shift), rng=0, n_boot=200) for k, shift in ((3, 1.0), (4, 0.0))
    ]
    untested = compare(*fast)
    assert len(untested.tests) == 4 and "eps_lower" not in fast[0].estimates[("loss", "all")].replicates
    assert math.isnan(fast[0].estimates[("loss", "all")].metrics["eps_lower"].low)


def test_eps_lower_replicates_are_the_one_run_bound_on_the_resampled_targets():
    # Replicate b pools every canary of the targets drawn in row b of the bootstrap: with a single
    # target every draw is that target, so each replicate is the bound on all its scores, which
    # differs between replicates only by the tie-breaking (none here: continuous scores).
    exp = fake_experiment(12, n_targets=1, n=400, shift=1.5)
    summary = summarise_experiment(exp, rng=0, n_boot=10, n_boot_eps=3)
    member, nonmember = exp.scores["loss"][exp.membership], exp.scores["loss"][~exp.membership]
    bound = epsilon_lower_bound(member, nonmember, rng=0)
    assert bound > 0
    np.testing.assert_array_equal(summary.estimates[("loss", "all")].replicates["eps_lower"], [bound] * 3)


def test_auc_interval_covers_the_analytic_auc():
    # Members N(d, 1), non-members N(0, 1): AUC = P(X_m > X_n) = Phi(d / sqrt(2)). A nominal 95%
    # percentile interval from 16 targets covers a little less: the cluster bootstrap's variance
    # is (T-1)/T of the truth (measured on this setting: 91% of 300 repetitions). Requiring 40 of
    # 50 (80%) leaves room for binomial noise: P(<= 39 covered) ~ 0.3% at 91%.
    d = 0.5
    truth = stats.norm.cdf(d / math.sqrt(2))
    covered = 0
    for rep in range(50):
        summary = summarise_experiment(
            fake_experiment(5000 + rep, n_targets=16, n=100, shift=d), rng=rep, n_boot=400, n_boot_eps=0
        )
        interval = summary.estimates[("loss", "all")].metrics["auc"]
        covered += interval.low <= truth <= interval.high
    assert covered >= 40


def test_metric_equal_on_every_replicate_has_p_one():
    # Members far below every non-member: TPR at 1% FPR is exactly 0 on every replicate of
    # both sides, so every d* is 0 -> p = 1, never significant.
    sides = [summarise_experiment(fake_experiment(k, shift=-20.0), rng=k, **FAST) for k in (6, 7)]
    test = compare(*sides).get("tpr_at_fpr_0.01", "loss", "all")
    assert (test.difference.point, test.difference.low, test.difference.high) == (0.0, 0.0, 0.0)
    assert test.p_value == 1.0 and test.p_adjusted == 1.0 and not test.significant


# -- the tests themselves, by hand ----------------------------------------------------------------
def test_bootstrap_difference_hand_case():
    # d* = [1, 2, 3, 4] - 0 has sample sd sqrt(((1.5)^2 + (0.5)^2) * 2 / 3) = sqrt(5/3) = 1.2910;
    # d = 2.5 - 0 -> z = 2.5 / 1.2910 = 1.9365, p = 2 (1 - Phi(1.9365)) = 0.05281.
    interval, p = bootstrap_difference(2.5, np.array([1.0, 2.0, 3.0, 4.0]), 0.0, np.zeros(4))
    assert p == pytest.approx(0.05281, abs=1e-5)
    assert interval.point == 2.5
    # percentile interval of d*: 2.5% and 97.5% quantiles, linearly interpolated
    assert (interval.low, interval.high) == pytest.approx((1 + 0.075 * 1, 3 + 0.925 * 1))
    assert bootstrap_difference(0.0, np.zeros(9), 0.0, np.zeros(9))[1] == 1.0
    # Replicates that agree exactly on a non-zero difference: no doubt left.
    assert bootstrap_difference(1.0, np.ones(9), 0.0, np.zeros(9))[1] == 0.0


def test_welch_test_matches_scipy_on_hand_case():
    victim, baseline = [0.90, 0.92, 0.95], [0.80, 0.85, 0.83, 0.84]
    interval, p = welch_test(victim, baseline, confidence=0.95)
    reference = stats.ttest_ind(victim, baseline, equal_var=False)
    ci = reference.confidence_interval(confidence_level=0.95)
    assert interval.point == pytest.approx(0.923333 - 0.83, abs=1e-6)
    assert p == reference.pvalue and (interval.low, interval.high) == (ci.low, ci.high)
    # By hand: means 2.77/3 = 0.92333 and 3.32/4 = 0.83; sample variances 0.0012667/2 = 0.00063333
    # and 0.0014/3 = 0.00046667; se^2 = 0.00063333/3 + 0.00046667/4 = 0.00032778;
    # t = 0.093333 / sqrt(0.00032778) = 5.155; Welch-Satterthwaite
    # df = 0.00032778^2 / ((0.00063333/3)^2 / 2 + (0.00046667/4)^2 / 3) = 4.006.
    assert reference.statistic == pytest.approx(5.155, abs=1e-3)
    assert reference.df == pytest.approx(4.006, abs=1e-3)
    assert p == pytest.approx(2 * stats.t.sf(5.155218, 4.005754), rel=1e-5)


def test_welch_test_without_variance():
    assert welch_test([0.9, 0.9], [0.9, 0.9])[1] == 1.0
    assert welch_test([0.9, 0.9], [0.8, 0.8])[1] == 0.0


def test_holm_hand_example():
    # p = [0.01, 0.04, 0.03, 0.005], m = 4. Sorted: 0.005, 0.01, 0.03, 0.04, multiplied by
    # m - j + 1 = 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04; running maximum: 0.02, 0.03, 0.06, 0.06.
    # Back in input order: [0.03, 0.06, 0.06, 0.02]; at alpha 0.05 the 1st and 4th are rejected.
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02], rtol=1e-12)
    # capped at 1: [0.5, 0.6] -> 2 x 0.5 = 1.0, max(1.0, 1 x 0.6) = 1.0
    np.testing.assert_allclose(holm([0.6, 0.5]), [1.0, 1.0])


def test_compare_needs_two_targets():
    one = summarise_experiment(fake_experiment(8, n_targets=1), rng=0, **FAST)
    two = summarise_experiment(fake_experiment(9, n_targets=2), rng=0, **FAST)
    with pytest.raises(ValueError, match="at least 2"):
        compare(one, two)


def test_labels_name_the_headline_and_varying_keys():
    exps = [
        fake_experiment(0, victim="dm", config={"ipc": 10, "init": "real", "iterations": 30}),
        fake_experiment(1, victim="dm", config={"ipc": 10, "init": "noise", "iterations": 30}),
        fake_experiment(2, victim="subset", config={"ipc": 10, "train": {"steps": 300}}),
    ]
    assert experiment_labels(exps) == ["dm ipc=10 init=real", "dm ipc=10 init=noise", "subset ipc=10"]


def test_markdown_table_rows():
    report = compare_experiments(
        [fake_experiment(10, shift=1.0, victim="dm")], fake_experiment(11), n_boot=400, n_boot_eps=0
    )
    text = markdown_table(report)
    assert "| subset ipc=10 | loss | all |" in text and "| baseline |" in text
    dm_row = next(line for line in text.splitlines() if line.startswith("| dm ipc=10 | loss | all |"))
    assert "ΔAUC +0." in dm_row and dm_row.endswith(" * |")


# -- loading and the command line -----------------------------------------------------------------
@pytest.fixture
def experiment_dirs(tmp_path):
    """A baseline and two victims on disk, the second with a much stronger signal."""
    baseline = write_experiment(
        tmp_path, fake_experiment(20, attacks=("loss", "lira_online"), init_per_target=5, name="subset-digits-aaa")
    )
    similar = write_experiment(
        tmp_path, fake_experiment(21, attacks=("loss", "lira_online"), victim="dm", name="dm-digits-bbb")
    )
    leaky = write_experiment(
        tmp_path,
        fake_experiment(
            22,
            shift=1.0,
            attacks=("loss", "lira_online"),
            victim="dm",
            config={"ipc": 10, "init": "real"},
            name="dm-digits-ccc",
        ),
    )
    return baseline, similar, leaky


def test_cli_prints_table_and_writes_json(experiment_dirs, tmp_path):
    baseline, similar, leaky = experiment_dirs
    out = tmp_path / "compare.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "audit.compare",
            str(similar),
            str(leaky),
            "--baseline",
            str(baseline),
            "--attack",
            "lira_online",
            "--n-boot",
            "200",
            "--n-boot-eps",
            "5",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("| experiment | attack | group | test acc | AUC |")
    assert any(
        line.startswith("| dm ipc=10 init=real | lira_online | all |") and line.endswith(" * |") for line in lines
    )
    data = json.loads(out.read_text())
    assert data["baseline"]["path"] == str(baseline)
    assert [e["label"] for e in data["experiments"]] == ["dm ipc=10", "dm ipc=10 init=real"]
    assert set(data["experiments"][1]["attacks"]) == {"lira_online"}
    tests = {(t["attack"], t["metric"]): t for t in data["comparisons"][1]["tests"]}
    assert tests[("lira_online", "auc")]["significant"] is True
    assert tests[(None, "test_accuracy")]["p_value"] is not None
    assert data["comparisons"][1]["n_tests"] == 5
    assert data["experiments"][1]["attacks"]["lira_online"]["all"]["eps_ceiling"] > 0


def test_cli_groups_and_seed_are_reproducible(experiment_dirs, capsys):
    baseline, similar, _ = experiment_dirs
    argv = [
        str(similar),
        "--baseline",
        str(baseline),
        "--group",
        "all",
        "init",
        "--n-boot",
        "50",
        "--n-boot-eps",
        "3",
        "--seed",
        "4",
    ]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == first
    assert "| subset ipc=10 | loss | init |" in first  # the baseline has init images, the victim none
    init_row = next(line for line in first.splitlines() if line.startswith("| subset ipc=10 | loss | init |"))
    assert init_row.split(" | ")[7:9] == ["-", "-"]  # a sub-group: no eps_lower, no eps_ceiling


@pytest.mark.parametrize(
    "case,named",
    [
        ("old plan", "plan 'stratified-complement-pairs-v1'"),
        ("no plan", "no recorded plan"),
        ("no ceiling", "no eps_ceiling for loss"),
    ],
)
def test_cli_refuses_an_experiment_of_an_earlier_plan(case, named, experiment_dirs, capsys):
    baseline, similar, _ = experiment_dirs
    meta, summary_path = similar / "experiment.json", similar / "audit" / "summary.json"
    if case == "old plan":
        meta.write_text(json.dumps({"victim": "dm", "plan": "stratified-complement-pairs-v1"}))
    elif case == "no plan":
        meta.unlink()
    else:
        summary = json.loads(summary_path.read_text())
        del summary["attacks"]["loss"]["eps_ceiling"]
        summary_path.write_text(json.dumps(summary))
    with pytest.raises(SystemExit) as exit_info:
        main([str(similar), "--baseline", str(baseline), "--n-boot", "20"])
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and captured.out == ""
    assert captured.err.count("\n") == 1 and named in captured.err and str(similar) in captured.err, captured.err


def test_an_experiment_without_fair_coins_has_no_eps_lower(experiment_dirs):
    # --inclusion-rate 0.3: summary.json's eps_lower and eps_ceiling are null; nothing is recomputed.
    baseline, similar, _ = experiment_dirs
    path = similar / "audit" / "summary.json"
    summary = json.loads(path.read_text())
    summary["evaluation"]["inclusion_rate"] = 0.3
    for entry in summary["attacks"].values():
        entry.update(eps_lower=None, eps_ceiling=None)
    path.write_text(json.dumps(summary))
    report = compare_experiments([load_experiment(similar)], load_experiment(baseline), n_boot=50, n_boot_eps=2)
    estimate = report.experiments[0].estimates[("loss", "all")]
    assert "eps_lower" not in estimate.metrics and estimate.eps_ceiling is None
    assert "eps_lower" in report.baseline.estimates[("loss", "all")].metrics
    assert not [t for t in report.comparisons[0].tests if t.metric == "eps_lower"]


@pytest.mark.parametrize("case", ["missing dir", "no scores", "unknown attack", "n-boot 0", "bad summary"])
def test_cli_bad_input_exits_2_with_one_line(case, experiment_dirs, tmp_path, capsys):
    baseline, similar, _ = experiment_dirs
    out = tmp_path / "never.json"
    argv, named = [str(similar), "--baseline", str(baseline), "--out", str(out), "--n-boot-eps", "2"], None
    if case == "missing dir":
        named = str(tmp_path / "nope")
        argv[0] = named
    elif case == "no scores":
        (similar / "audit" / "scores.npz").unlink()
        named = str(similar / "audit" / "scores.npz")
    elif case == "unknown attack":
        argv += ["--attack", "dcr"]
        named = "'dcr'"
    elif case == "n-boot 0":
        argv += ["--n-boot", "0"]
        named = "'0'"
    else:
        (baseline / "audit" / "summary.json").write_text("{not json")
        named = str(baseline / "audit" / "summary.json")
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and named in captured.err and "Traceback" not in captured.err
    assert not out.exists()


def test_load_experiment_errors_name_the_path(experiment_dirs):
    _, similar, _ = experiment_dirs
    (similar / "runs" / "00003.json").write_text(json.dumps({"seed": 3}))
    with pytest.raises(ExperimentError, match=r"00003\.json: test_accuracy"):
        load_experiment(similar)
    (similar / "audit" / "scores.npz").write_bytes(b"not a zip")
    with pytest.raises(ExperimentError, match=r"scores\.npz: unreadable") as info:
        load_experiment(similar)
    assert "\n" not in str(info.value)
