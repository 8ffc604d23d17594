"""How much a release leaks (`audit.releases.leakage`): thresholds fixed on other runs, the counts
behind each TPR, the strongest-attack rule, and the prediction test against random subsets, with
its false-alarm rate and power measured on draws of known distribution."""

import math

import numpy as np
import pytest

from audit.releases.leakage import (
    Flagged,
    at_chance,
    choice_runs_needed,
    choose_attacker,
    compare_with_subsets,
    few_runs_warnings,
    flag,
    guessing_p,
    runs_needed,
    threshold_at,
)
from audit.reporting.verdict import format_p
from audit.stats.significance import prediction_test


def test_the_threshold_lets_at_most_floor_fpr_n_nonmembers_above_it():
    scores = np.arange(1.0, 251.0)  # 250 distinct non-member scores
    # fpr 1%: floor(2.5) = 2 may exceed it, so t is the 3rd largest, 248; 249 and 250 are above.
    assert threshold_at(scores, 0.01) == 248.0
    # fpr 0.1%: floor(0.25) = 0, t is the largest: nothing above it.
    assert threshold_at(scores, 0.001) == 250.0
    assert threshold_at(np.append(scores, np.nan), 0.01) == 248.0  # NaN scores count nowhere
    assert threshold_at(scores, 1.0) == -math.inf  # every score may be flagged
    with pytest.raises(ValueError, match="no non-member score"):
        threshold_at(np.array([np.nan]), 0.01)


def test_flag_counts_members_found_and_nonmembers_wrongly_flagged():
    scores = np.array([5.0, 4.0, 3.0, 2.0, 1.0, np.nan])
    member = np.array([True, False, True, False, True, True])
    f = flag(scores, member, threshold=2.5, fpr=0.01)
    # above 2.5: rows 0 (member), 1 (non-member), 2 (member); the NaN member is not scored
    assert (f.members_flagged, f.members, f.nonmembers_flagged, f.nonmembers) == (2, 3, 1, 2)
    assert f.tpr == 2 / 3 and f.realised_fpr == 0.5
    # ties at the threshold are not flagged
    assert flag(scores, member, threshold=3.0, fpr=0.01).members_flagged == 1


def test_the_strongest_attack_is_the_largest_tpr_at_the_references_one_percent_threshold():
    rng = np.random.default_rng(0)
    keep = rng.random((4, 500)) < 0.5
    noise = rng.standard_normal((4, 500))
    pseudo = {
        "blind": (noise, keep),
        "sharp": (noise + 3.0 * keep, keep),  # members shifted by 3 sd
        "mild": (noise + 1.0 * keep, keep),
    }
    choice = choose_attacker(pseudo)
    assert choice.strongest == "sharp" and choice.n_pseudo == 4
    for attack, (scores, k) in pseudo.items():  # each threshold leaves at most 1% of pooled non-members above
        assert (scores[~k] > choice.thresholds[attack][0.01]).sum() <= math.floor(0.01 * (~k).sum())
    assert choice.reference_tpr["sharp"][0.01] > 0.5 > choice.reference_tpr["blind"][0.01]
    # equal TPRs at both rates: the first attack in registry order
    tied = choose_attacker({"first": (noise, keep), "second": (noise.copy(), keep)})
    assert tied.strongest == "first"


def test_the_prediction_test_by_hand():
    # 0.1 against (0.2, 0.3, 0.4): mean 0.3, s = 0.1, t = -0.2 / (0.1 sqrt(1 + 1/3)) = -sqrt(3);
    # Student's t with 2 df has cdf 1/2 + t / (2 sqrt(2 + t^2)) = 1/2 - sqrt(3) / (2 sqrt(5)) = 0.11270.
    t, p_less, p_more = prediction_test(0.1, [0.2, 0.3, 0.4])
    assert t == pytest.approx(-math.sqrt(3), abs=1e-12)
    assert p_less == pytest.approx(0.5 - math.sqrt(3) / (2 * math.sqrt(5)), abs=1e-12)
    assert p_more == pytest.approx(1 - p_less, abs=1e-12)
    assert prediction_test(0.3, [0.3, 0.3, 0.3]) == (0.0, 1.0, 1.0)
    assert prediction_test(0.1, [0.3, 0.3]) == (-math.inf, 0.0, 1.0)
    t, p_less, p_more = prediction_test(0.1, [0.3])
    assert math.isnan(t) and (p_less, p_more) == (1.0, 1.0)


def _flags(tprs, members=5000):
    return [Flagged(0.01, 0.0, round(t * members), members, 50, 5000) for t in tprs]


@pytest.mark.parametrize("n_subsets", [4, 16])
def test_false_alarms_of_the_subset_comparison_at_most_alpha_and_its_power(n_subsets):
    # A release whose TPR is one more draw from the subsets' distribution is called "less" or
    # "more" in 5% of 1,000 seeded repetitions (exact under normality: the binomial sd is 0.69%, the
    # band below is 3 sd; measured 4.3% at 4 subsets, 4.0% at 16). Shifted by 3 sd of that
    # distribution it is found in 44% of them with 4 subsets and 78% with 16 (measured).
    alarms, found = 0, 0
    for seed in range(1000):
        rng = np.random.default_rng(seed)
        values = 0.2 + 0.02 * rng.standard_normal(n_subsets + 1)
        same = compare_with_subsets(_flags(values[:1])[0], _flags(values[1:]), alpha=0.05)
        alarms += same["outcome"] != "no measurable difference"
        lower = compare_with_subsets(_flags([values[0] - 0.06])[0], _flags(values[1:]), alpha=0.05)
        found += lower["outcome"] == "less"
    assert 0.05 - 0.021 <= alarms / 1000 <= 0.05 + 0.021, alarms
    assert found / 1000 > (0.35 if n_subsets == 4 else 0.7), found


def test_p_values_below_one_in_a_million_are_not_printed_as_digits():
    assert format_p(5.81e-221) == "< 1e-6" and format_p(0.0123) == "= 0.0123" and format_p(1e-6) == "= 1e-06"


def test_runs_needed_give_ten_reference_nonmember_scores_above_the_threshold():
    # 10 / f scores: 1,000 at 1 in 100, 10,000 at 1 in 1,000. The README's pool: 1,200 rows less a 20%
    # test split, 960, at rate 0.5: 480 non-members per run, ceil(1,000 / 480) = ceil(2.08) = 3 runs and
    # ceil(10,000 / 480) = ceil(20.8) = 21. 1,500 examples: 750 per run, ceil(1.33) = 2 and ceil(13.3) = 14.
    assert runs_needed(0.01, n_pool=960, inclusion_rate=0.5) == 3
    assert runs_needed(0.001, n_pool=960, inclusion_rate=0.5) == 21
    assert runs_needed(0.01, n_pool=1500, inclusion_rate=0.5) == 2
    assert runs_needed(0.001, n_pool=1500, inclusion_rate=0.5) == 14
    # rate 0.2: 1,200 non-members of 1,500 per run, 10,000 / 1,200 = 8.33: 9 runs; exactly 10 scores per run at 1%: 100
    assert runs_needed(0.001, n_pool=1500, inclusion_rate=0.2) == 9
    assert runs_needed(0.01, n_pool=2000, inclusion_rate=0.5) == 1  # 1,000 non-members in one run
    # the choice: a pseudo-target needs one other reference (2 runs), LiRA-style attacks 4 runs
    assert choice_runs_needed(["loss", "rmia", "dcr"]) == 2
    assert choice_runs_needed(["loss", "lira_online", "dcr_lira"]) == 4


def test_few_runs_warnings_say_how_many_runs_would_do():
    attacks = ["loss", "lira_online", "rmia", "dcr_lira"]
    # The README's pool at its 16 runs: 16 x 480 = 7,680 scores, fewer than 10,000 for 1 in 1,000 (21 runs).
    needed, warnings = few_runs_warnings(16, n_pool=960, inclusion_rate=0.5, attacks=attacks)
    assert needed == {"0.01": 3, "0.001": 21, "attack_choice": 4}
    assert warnings == [
        "--n-shadow 16 is too few for the 1 in 1,000 figure: its threshold is set on about 7,680 reference "
        "non-member scores (480 per run: 960 examples at inclusion rate 0.5), and pinning its rate takes 10,000 (10 "
        "expected above it); 21 runs would do"
    ]
    assert few_runs_warnings(21, n_pool=960, inclusion_rate=0.5, attacks=attacks)[1] == []
    # 2 runs: 960 scores, short of 1,000 at 1 in 100 too; and each pseudo-target has 1 reference.
    _, warnings = few_runs_warnings(2, n_pool=960, inclusion_rate=0.5, attacks=attacks)
    assert [w.split(":")[0] for w in warnings] == [
        "--n-shadow 2 is too few for the 1 in 100 figure",
        "--n-shadow 2 is too few for the 1 in 1,000 figure",
        "--n-shadow 2 is too few to choose the strongest attack",
    ]
    assert "about 960 reference non-member scores" in warnings[0] and warnings[0].endswith("3 runs would do")
    assert warnings[2] == (
        "--n-shadow 2 is too few to choose the strongest attack: each reference run is scored against the other 1, "
        "and lira_online, dcr_lira need 4 runs; 4 runs would do"
    )


@pytest.mark.parametrize("n_scores,pinned", [(10_000, True), (1_500, False)])
def test_ten_expected_scores_above_a_threshold_pin_its_rate_to_a_third(n_scores, pinned):
    # The threshold at 1 in 1,000 is the (floor(n/1,000) + 1)-th largest of n non-member scores; its
    # true rate (the share of fresh uniform scores above it) is Beta(j, n + 1 - j), relative sd
    # sqrt((n + 1 - j) / (j (n + 2))): j = 11 at 10,000 scores, 0.301 <= 1/sqrt(10) = 0.316 (5th-95th
    # percentiles 1 in 1,600 to 1 in 590); j = 2 at 1,500 scores (2 runs of 750), 0.707 (1 in 4,200 to
    # 1 in 320). Measured over 2,000 draws.
    rng = np.random.default_rng(0)
    rates = np.array([1 - threshold_at(rng.random(n_scores), 0.001) for _ in range(2000)])
    j = n_scores // 1000 + 1
    spread = math.sqrt((n_scores + 1 - j) / (j * (n_scores + 2)))
    assert rates.std() / rates.mean() == pytest.approx(spread, rel=0.06)
    assert (spread <= 1 / math.sqrt(10)) == pinned


def test_a_figure_is_at_chance_unless_members_found_beat_nonmembers_flagged():
    # One-sided Fisher exact test: given the x + y examples flagged, x of the m members and y of the n
    # non-members, P(H >= x) for H ~ Hypergeometric(m + n, x + y, m).
    # 3 of 4 members, 0 of 4 non-members: P(H = 3) = C(4,3) C(4,0) / C(8,3) = 4 / 56 = 1/14 = 0.071.
    three = Flagged(0.01, 0.0, 3, 4, 0, 4)
    assert guessing_p(three) == pytest.approx(1 / 14, rel=1e-12)
    assert at_chance(three, alpha=0.05) and not at_chance(three, alpha=0.1)
    # 4 of 4 against 0 of 4: 1 / C(8,4) = 1/70 = 0.014 < 0.05, above guessing.
    four = Flagged(0.01, 0.0, 4, 4, 0, 4)
    assert guessing_p(four) == pytest.approx(1 / 70, rel=1e-12) and not at_chance(four, alpha=0.05)
    # TPR <= realised FPR is guessing at any alpha: 1 of 4 against 1 of 4, P(H >= 1) = 1 - C(4,2) / C(8,2) = 22/28.
    even = Flagged(0.01, 0.0, 1, 4, 1, 4)
    assert guessing_p(even) == pytest.approx(22 / 28, rel=1e-12) and at_chance(even, alpha=0.99)
    # "0.9% found while 1% are wrongly flagged": 4 of 450 members against 5 of 500 non-members.
    assert at_chance(Flagged(0.01, 0.0, 4, 450, 5, 500), alpha=0.05)
    # nothing flagged: p = 1; the p-value is recorded with the counts
    none = Flagged(0.001, 0.0, 0, 450, 0, 500)
    assert guessing_p(none) == 1.0 and none.to_json()["p_guessing"] == 1.0 and at_chance(none, alpha=0.05)
