"""`--until-decided` (audit.rounds): the audit trains its runs in rounds, reads the verdict at each
look's share of the error, and stops once the claim is violated or cannot be; end to end on digits."""

import json

import pytest

from audit import lira
from audit.reporting.verdict import EPSILON_CONSISTENT, Verdict, one_decision
from audit.rounds import audit_in_rounds
from audit.stats.sequential import schedule
from audit.result import AuditResult

#: the subset baseline releases 10 real images per class: distance to the closest record finds its
#: members without a miss, so the verdict's bound at the first look (4 runs, 2 targets) is 3.75
#: (measured on master seeds 0, 1 and 2 alike: perfect guesses, so the figure is the count's, not luck's)
SUBSET = ["--victim", "subset", "--ipc", "10", "--n-shadow", "16", "--first-look", "4", "--until-decided"]


def audit(runs_dir, *flags):
    return lira.main(["--runs-dir", str(runs_dir), *flags])


def summary_of(runs_dir):
    (root,) = [p for p in runs_dir.iterdir() if p.is_dir()]
    return root, json.loads((root / "audit" / "summary.json").read_text())


def test_a_violated_claim_stops_the_audit_at_the_first_look_that_rejects_it(tmp_path, tiny_flags, capsys):
    assert audit(tmp_path, *SUBSET, "--claimed-epsilon", "2", *tiny_flags) == 0
    root, summary = summary_of(tmp_path)
    rounds = summary["sequential"]
    # looks after 4, 8 and 16 runs; α = 0.05 spent 4/16, 4/16, 8/16: the first look at 98.75%
    assert rounds["schedule"] == [4, 8, 16] and rounds["alphas"] == pytest.approx([0.0125, 0.0125, 0.025])
    assert rounds["stopped"] == "violated" and rounds["runs_used"] == 4 and len(rounds["looks"]) == 1
    assert rounds["looks"][0]["verdict"] == "epsilon_violated" and rounds["looks"][0]["eps_lower"] > 2
    # summary.json is the look's: 4 runs, 2 targets, its confidence; only 4 runs were trained
    assert summary["n_shadow"] == 4 and summary["target_runs"] == [0, 1]
    assert summary["evaluation"]["confidence"] == pytest.approx(0.9875)
    assert summary["verdict"]["eps_lower"] == rounds["looks"][0]["eps_lower"]
    assert len(list((root / "runs").glob("*.json"))) == 4
    # the fixed design's bound of the same runs at 95% is reported beside it, never above the look's own
    # count's reach at the full level, and said to be descriptive
    assert rounds["fixed_design"]["eps_lower"] >= rounds["looks"][0]["eps_lower"] - 1e-9
    assert "descriptive" in rounds["fixed_design"]["note"]
    assert "rounds: violated (by the ε verdict) after 4 of 16 runs" in capsys.readouterr().out
    assert rounds["tests"] == ["eps_verdict"] and rounds["stopped_by"] == "eps_verdict"  # subset records no mechanism


def test_a_claim_beyond_the_final_looks_ceiling_stops_as_not_testable(tmp_path, tiny_flags):
    # a perfect attack on the final look's 8 targets x 1,500 examples at 97.5% certifies about 8.1 at δ = 0
    assert audit(tmp_path, *SUBSET, "--claimed-epsilon", "20", *tiny_flags) == 0
    _, summary = summary_of(tmp_path)
    rounds = summary["sequential"]
    assert rounds["stopped"] == "not testable" and rounds["runs_used"] == 4
    assert 7.0 < rounds["final_ceiling"] < 20


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--n-targets", "2"], "--until-decided makes the first half of each look's runs its targets"),
        (["--first-look", "32"], "the first look (32 runs) is beyond --n-shadow 16"),
        (["--first-look", "1"], "--first-look: must be an integer >= 2"),
    ],
)
def test_until_decided_refuses_flags_that_do_not_fit(tmp_path, tiny_flags, capsys, flags, named):
    with pytest.raises(SystemExit) as exit_info:
        audit(tmp_path / "runs", "--victim", "real", "--n-shadow", "16", "--until-decided", *flags, *tiny_flags)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err, err
    assert not (tmp_path / "runs").exists()


def look_summary(n_runs: int, confidence: float, *, own_rejected: bool, records_mechanism: bool) -> AuditResult:
    """A look's result as `score_at` makes it at the look's share `confidence`: a consistent ε test
    (0.1 against a claim of 1, 1,000 canaries a target run), and where the runs record a mechanism
    the own curve's test, rejecting or not, each at half the share, and their one decision."""
    split = 1 - (1 - confidence) / 2 if records_mechanism else confidence
    levels = {"eps_verdict": split, **({"own_curve": split} if records_mechanism else {})}
    own = {"rejected": own_rejected, "confidence": split, "attack": "loss", "eps_lower": 1.5}
    data = {
        "n_shadow": n_runs,
        "target_runs": list(range(n_runs // 2)),
        "delta": 1e-5,
        "claimed_epsilon": 1.0,
        "formal_epsilon": 1.0,
        "evaluation": {"n_canaries": 1000 * (n_runs // 2), "confidence": confidence},
        "verdict": {"eps_lower": 0.1, "eps_ceiling": 5.0, "delta": 1e-5, "confidence": split, "levels": levels},
    }
    data["verdict"]["mechanism"] = own if records_mechanism else None
    eps = Verdict(EPSILON_CONSISTENT, "consistent", "the bound is below the claim")
    return AuditResult.from_json(data, verdict=one_decision(eps, data["verdict"]["mechanism"], level=split))


@pytest.mark.parametrize("records_mechanism", [True, False])
def test_the_own_curve_stops_the_rounds_at_half_the_share_where_the_runs_record_a_mechanism(records_mechanism):
    # looks after 4, 8, 16 runs, α = 0.05 spent 4/16, 4/16, 8/16 = 0.0125, 0.0125, 0.025. Each look is
    # scored at its share; with a mechanism its verdict runs two tests at half of it (1 - 0.0125 / 2 =
    # 0.99375 at the first two) and the first look's `levels` make the schedule's tests 2. The own curve
    # rejects from the second look: its one decision is violated, and the audit stops there, by the own curve.
    # Without one, there is no own-curve test: the looks run on to the budget.
    trained, scored = [], []

    def score_at(n_runs, confidence):
        scored.append((n_runs, confidence))
        return look_summary(n_runs, confidence, own_rejected=n_runs >= 8, records_mechanism=records_mechanism)

    found = audit_in_rounds(schedule(16, first=4, confidence=0.95), trained.append, score_at, quiet=True)
    rounds = found.sequential
    if records_mechanism:
        assert rounds["tests"] == ["eps_verdict", "own_curve"] and trained == [4, 8]
        assert [c for _, c in scored] == pytest.approx([0.9875, 0.9875, 0.95])  # then the fixed design's
        assert [look["confidence"] for look in rounds["looks"]] == pytest.approx([0.99375, 0.99375])
        assert rounds["stopped"] == "violated" and rounds["stopped_by"] == "own_curve" and rounds["runs_used"] == 8
        assert rounds["looks"][-1]["verdict"] == "epsilon_violated"
    else:
        assert rounds["tests"] == ["eps_verdict"] and trained == [4, 8, 16]
        assert [c for _, c in scored] == pytest.approx([0.9875, 0.9875, 0.975, 0.95])
        assert rounds["stopped"] == "budget spent" and rounds["stopped_by"] is None
