"""The terminal's lines (`audit.outputs.describe`): every term they print is in their legend, the
verdict says which attack it rests on and why, figures at chance say so, and too few runs warn."""

import re
from pathlib import Path

from audit import outputs
from audit.reporting.remarks import at_chance, own_curve, too_few_runs
from audit import api
from audit.result import AuditResult


def attack(auc, tpr_1, tpr_01, eps, *, predicted=None, views="image"):
    """A summary.json attack entry of a `real` audit with 4 targets x 1,500 examples (2,932 IN)."""
    return {
        "auc": auc,
        "tpr_at_fpr": {"0.1": 0.2, "0.01": tpr_1, "0.001": tpr_01},
        "fp_at_fpr": {"0.1": 306, "0.01": 30, "0.001": 3},
        "n_members": 2932,
        "n_nonmembers": 3068,
        "eps_hat": 2.0,
        "guess_rule": "tuned",
        "eps_lower": eps,
        "eps_ceiling": 7.602,
        "eps_lower_fdp": eps - 0.01,
        "eps_ceiling_fdp": 7.602,
        "confidence": 0.95,
        "reference_choice": {"views": views, "predicted_eps_lower_fdp": predicted},
    }


def summary(**changes):
    found = {
        "victim": "real",
        "dataset": "digits",
        "n_shadow": 8,
        "target_runs": [0, 1, 2, 3],
        "formal_epsilon": None,
        "delta": None,
        "utility": {"test_accuracy": 0.982, "test_accuracy_std": 0.003},
        "evaluation": {"confidence": 0.95},
        "attacks": {
            "loss": attack(0.539, 0.011, 0.0010, 0.72, predicted=0.5, views="all"),
            "rmia": attack(0.643, 0.046, 0.0113, 1.95, predicted=1.86),
            "rmia_offline": attack(0.628, 0.044, 0.0153, 2.59, predicted=1.2),
        },
        "verdict": {
            "rule": "tuned",
            "attack": "rmia",
            "eps_lower": 1.9377,
            "eps_ceiling": 7.602,
            "confidence": 0.95,
            "per_attack_confidence": 0.95,
            "delta": 0.0,
            "bounds": {"rmia": 1.9377},
            "ceilings": {"rmia": 7.602},
            "candidates": ["loss", "rmia", "rmia_offline"],
        },
    }
    found.update(changes)
    return found


def reread(found: dict) -> AuditResult:
    """The result as the command made it: its verdict against the claim it records."""
    return api.reread(found)


def test_the_verdict_names_its_attack_and_why_that_one():
    line = outputs.verdict_line(reread(summary()))
    assert line.splitlines()[0] == (
        "  verdict: no ε claim was checked; ε ≥ 1.94 at 95% (f-DP test) from rmia, the attack whose predicted "
        "bound on the reference runs (1.86) was the largest of 3 attacks, chosen before any target was judged; "
        "ceiling 7.60"
    )


def test_a_verdict_without_references_to_choose_on_says_it_paid_for_every_attack():
    grid = {**summary()["verdict"], "rule": "grid", "per_attack_confidence": 1 - 0.05 / 3}
    line = outputs.verdict_line(reread(summary(verdict=grid)))
    assert "from rmia, the largest bound of 3 attacks, each at 98.33% so that the largest holds at 95%" in line


def test_figures_at_chance_are_marked_by_a_one_sided_binomial_test():
    # loss finds round(0.011 x 2,932) = 32 members at 1% FPR where guessing finds 29.3 on average:
    # P(Binomial(2932, 0.01) >= 32) = 0.33 >= 0.05, chance; rmia's round(0.046 x 2,932) = 135 is
    # ~19 standard deviations above 29.3, not chance.
    loss, rmia = summary()["attacks"]["loss"], summary()["attacks"]["rmia"]
    assert at_chance(loss, rate="0.01") and not at_chance(rmia, rate="0.01")
    # at 0.1% FPR guessing finds 2.9; rmia's round(0.0113 x 2,932) = 33 is far above, loss's 3 is not
    assert at_chance(loss, rate="0.001") and not at_chance(rmia, rate="0.001")
    lines = outputs.describe(reread(summary()), Path("s.json")).splitlines()
    assert "TPR@1%FPR 0.011 (chance)  TPR@0.1%FPR 0.0010 (chance)" in lines[1]
    assert "(chance)" not in lines[2]


def test_too_few_runs_for_a_figure_warn_with_how_many_would_do():
    # 0.1% of the targets' 3,068 non-members is 3.07 false positives < 10; 10 need
    # ceil(10 / (0.001 x 3,068 / 4)) = ceil(13.04) = 14 target runs. 1% gives 30.7 >= 10: no warning.
    assert too_few_runs(reread(summary())) == [
        "TPR@0.1%FPR: 0.1% of the targets' 3,068 non-members is 3.1 false positives, too few to pin the rate "
        "(10 at least): 14 target runs would (--n-targets 14, --n-shadow 28 or more)"
    ]
    many = {name: {**a, "n_nonmembers": 12_000} for name, a in summary()["attacks"].items()}
    assert too_few_runs(reread(summary(attacks=many))) == []
    one_reference = summary(n_shadow=2, target_runs=[0], verdict={**summary()["verdict"], "rule": "grid"})
    assert too_few_runs(reread(one_reference))[-1] == (
        "1 reference run: too few to choose the verdict's attack on (2 at least, and LiRA's 4), so the verdict "
        "splits its confidence over every attack: --n-shadow 5 or more lets the reference runs choose"
    )


def test_every_term_printed_is_in_the_legend():
    described = outputs.describe(reread(summary(formal_epsilon=9.9917, delta=1e-5)), Path("s.json"))
    legend = described[described.index("  terms: ") :]
    defined = re.findall(r"^\s+(?:terms: )?([^:]+): ", legend, flags=re.M)
    assert set(defined) == {
        "AUC",
        "TPR@1%FPR",
        "eps_hat",
        "eps_lower",
        "ceilings",
        "tuned",
        "image view only",
        "(chance)",
        "verdict",
        "formal ε",
        "canaries",  # the verdict's reason says how many canaries would make the claim testable
    }
    table = described[: described.index("  terms: ")]
    for term in defined:
        assert term.split()[0] in table, term
    assert described.splitlines()[0] == (
        "real on digits, 8 runs: 4 targets, 4 reference runs; test accuracy 0.982 (mean over the 8 runs); "
        "formal ε 9.992"
    )


def test_the_own_curve_names_its_parameters_in_words_and_says_what_its_epsilon_is():
    # "T" is the target runs elsewhere: the mechanism's steps are named as such, and its ε (tight
    # accounting of the curve, 9.11) is told apart from the formal ε (the accountant's upper bound)
    mechanism = {
        "claimed": {"noise_multiplier": 1.2976, "sample_rate": 0.34133, "steps": 32},
        "eps_claimed": 9.1075,
        "rejected": False,
        "noise_rejected": 2.5,
        "eps_lower": 1.234,
        "eps_ceiling": 19.39,
        "rule": "tuned",
        "attack": "rmia",
        "confidence": 0.95,
        "delta": 1e-5,
    }
    assert "  own curve: " + own_curve(mechanism) == (
        "  own curve: the claimed mechanism (noise multiplier 1.298, sample rate 0.3413, 32 steps; ε 9.11 at "
        "δ = 1e-05 by tight accounting, where the formal ε is the accountant's upper bound) not rejected "
        "at 95% (rmia, tuned); every noise multiplier >= 2.5 at this sample rate and step count is ruled out: "
        "ε ≥ 1.23 relative to the family; ceiling 19.39"
    )
    described = outputs.describe(
        reread(summary(formal_epsilon=9.9917, delta=1e-5, verdict={**summary()["verdict"], "mechanism": mechanism})),
        Path("s.json"),
    )
    assert " T " not in described and "own curve: the f-DP test" in described
    assert "so it can lie below the formal ε, the accountant's upper bound" in described
