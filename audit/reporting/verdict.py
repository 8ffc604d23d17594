"""Verdicts in plain words, each given only when the numbers behind it support it.

`epsilon_verdict`: is the leakage consistent with an ε claim, from f_{ε,δ} lower bounds that hold jointly at
`confidence` and the design's ceiling: "violated", "not testable with this design", "consistent" (no violation found;
not a proof), or no claim checked; none without independent fair coins (`no_fair_coins_verdict`). `subset_verdict`: is
the release better than a random real subset of its size (Holm-adjusted tests)? The release audit's:
`release_leakage_verdict`, `release_subset_verdict`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from audit.claim import Claim
from audit.result import AuditResult
from audit.stats.epsilon import MOST_CANARIES
from audit.stats.guesses import EPS_TEST, OWN_CURVE, canaries_needed, most_certifiable
from audit.stats.significance import MetricComparison

EPSILON_VIOLATED = "epsilon_violated"
EPSILON_CONSISTENT = "epsilon_consistent"
EPSILON_NOT_TESTABLE = "epsilon_not_testable"
NO_EPSILON_CLAIM = "no_epsilon_claim"
NO_FAIR_COINS = "no_fair_coins"
NO_GAIN_OVER_SUBSET = "no_gain_over_subset"
GAIN_OVER_SUBSET = "gain_over_subset"
NO_SUBSET_BASELINE = "no_subset_baseline"
MORE_THAN_SUBSET = "more_than_subset"
RELEASE_LEAKAGE = "release_leakage"
KINDS = (
    EPSILON_VIOLATED,
    EPSILON_CONSISTENT,
    EPSILON_NOT_TESTABLE,
    NO_EPSILON_CLAIM,
    NO_FAIR_COINS,
    NO_GAIN_OVER_SUBSET,
    GAIN_OVER_SUBSET,
    NO_SUBSET_BASELINE,
    MORE_THAN_SUBSET,
    RELEASE_LEAKAGE,
)
#: p-values below this print as "p < 1e-6": no test here is calibrated that far into its tail
SMALLEST_P = 1e-6
#: the metrics where "lower" means "less leakage" (every attack metric audit.compare tests)
PRIVACY_METRICS = ("auc", "tpr_at_fpr_0.01", "tpr_at_fpr_0.001", "eps_lower")


@dataclass(frozen=True)
class Verdict:
    """One verdict: its kind (one of KINDS), the plain-words sentence, and the numbers behind it."""

    kind: str
    text: str
    reason: str
    evidence: tuple[str, ...] = field(default=())  # the attacks (or attack/metric pairs) it rests on
    checked: str = ""  # an ε verdict's claim in words, "claimed ε = 2 at δ = 1e-05"; "" where none was checked
    rejected_by: tuple[str, ...] = ()  # the tests that rejected the claim (`one_decision`)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"verdict kind must be one of {KINDS}, got {self.kind!r}")

    @property
    def alarming(self) -> bool:
        """A verdict a reader must not miss: a violated claim."""
        return self.kind == EPSILON_VIOLATED

    def to_json(self) -> dict:
        words = {"kind": self.kind, "text": self.text, "reason": self.reason}
        return {**words, "evidence": list(self.evidence), "rejected_by": list(self.rejected_by)}


def percent(confidence: float) -> str:
    """A confidence in words as exact as it is: 0.95 -> "95%", 0.975 -> "97.5%"."""
    return f"{100 * confidence:.4g}%"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and its noun, singular or plural: "1 target", "3,000 canaries" (`plural` where not noun + "s")."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def epsilon_verdict(
    bounds: Mapping[str, float],
    *,
    ceiling: float | Mapping[str, float],
    claim: Claim | None,
    delta: float,
    confidence: float,
    n_canaries: int | None = None,
    per_target: int | None = None,
    rule: str = "grid",
    chosen_by: str | None = None,
) -> Verdict:
    """The ε verdict against `claim` (checked, or None) from per-attack lower bounds holding jointly at
    `confidence`; `ceiling` the design's (`audit.stats.epsilon.epsilon_ceiling`), one or one per attack;
    `n_canaries`, `per_target` name the design an untestable claim needs; `rule` "tuned" or "grid"
    (Bonferroni), `chosen_by` "fixed" where the tuned attack and count were fixed in advance."""
    ceilings = _ceilings(bounds, ceiling)
    paid = _paid(rule, len(bounds), confidence, chosen_by)
    if claim is None:
        best = _best(bounds)
        tail = ""
        if best:
            tail = (
                f"; the ε lower bound found is {best[1]:.2f} ({best[0]}; {paid}), "
                f"where a perfect attack would reach ε ≈ {ceilings[best[0]]:.2f} with this design"
            )
        return Verdict(
            NO_EPSILON_CLAIM,
            "no ε claim was checked",
            f"the victim has no formal ε and none was claimed with --claimed-epsilon{tail}",
        )
    if claim.epsilon is None:
        raise ValueError("epsilon_verdict needs a checked claim (audit.claim.checked_claim), got no epsilon")
    claimed_epsilon = claim.epsilon
    if not bounds:
        raise ValueError("epsilon_verdict needs at least one attack's bound")
    level = percent(confidence)
    each = 1 - (1 - confidence) / len(bounds)
    stated = f"{claim.source} ε = {claimed_epsilon:.4g} (δ = {delta:g})"
    checked = f"{claim.source} ε = {claimed_epsilon:.4g} at δ = {delta:g}"
    violated = {a: b for a, b in bounds.items() if b > claimed_epsilon}
    if violated:
        worst = sorted(violated.items(), key=lambda item: -item[1])
        details = "; ".join(f"{a}: ε ≥ {b:.2f}" for a, b in worst)
        return Verdict(
            EPSILON_VIOLATED,
            f"claimed ε violated at {level} confidence",
            f"{details} exceeds the {stated}; {paid}",
            evidence=tuple(a for a, _ in worst),
            checked=checked,
        )
    attack, best = _best(bounds)
    top = max(ceilings.values())
    design = (f"{_canaries(n_canaries, per_target)}; " if n_canaries else "") + f"{paid}; δ = {delta:g}"
    if claimed_epsilon >= top:
        return Verdict(
            EPSILON_NOT_TESTABLE,
            "not testable with this design",
            f"the {stated} is at or above ε ≈ {top:.2f}, the most that even a perfect attack could "
            f"certify with this design ({design}), so no attack could have shown a violation (the "
            f"largest bound found is ε ≥ {best:.2f}, {attack}). "
            + _what_would_test(
                claimed_epsilon, delta=delta, confidence=each, n_canaries=n_canaries, per_target=per_target, rule=rule
            ),
            checked=checked,
        )
    blind = sorted(a for a, c in ceilings.items() if c <= claimed_epsilon)
    note = f"; {', '.join(blind)} scored too few canaries to exceed the claim even if perfect" if blind else ""
    return Verdict(
        EPSILON_CONSISTENT,
        "leakage consistent with the claimed ε",
        f"every ε lower bound ({paid}) is at most the "
        f"{stated}; the largest is ε ≥ {best:.2f} ({attack}), where a perfect attack would have "
        f"reached ε ≈ {top:.2f} with this design ({_design(n_canaries, per_target, delta)}){note}. A lower bound below "
        "the claim "
        f"means these attacks found no violation; it does not prove the claim",
        evidence=tuple(a for a in bounds if a not in blind),
        checked=checked,
    )


def judged(result: AuditResult, claim: Claim | None) -> AuditResult:
    """`result` (`audit.summary`'s, its bound at the claim's δ) with `claim` (either part None where not given; an ε
    without δ is at the audit's δ) and the verdict on it, made here once against the claimed ε, else the victim's formal
    ε (`checked_claim`). summary.json's `verdict` records its `kind`, `text`, `reason` and `rejected_by`."""
    if claim is not None and claim.epsilon is not None and claim.delta is None:
        claim = Claim.given(claim.epsilon, result.delta or 0.0)
    result = replace(result, claim=claim)
    verdict = audit_verdict(result, result.checked_claim())
    if verdict is None:
        return replace(result, verdict=None)
    decision = verdict.to_json()
    bound = {**result.bound, **{key: decision[key] for key in ("kind", "text", "reason", "rejected_by")}}
    return replace(result, bound=bound, verdict=verdict)


def audit_verdict(result: AuditResult, claim: Claim | None) -> Verdict | None:
    """The ε verdict of an audit: its paid-for bound (`result.bound`, at the claim's δ) against `claim`, both parts set
    (`audit.claim.checked_claim`; None: "no ε claim was checked"); None where no bound applies. Made by `judged`, and
    again by `summary_verdict` from a re-read summary.json."""
    found = result.bound
    if not found:
        return None
    n_canaries = result.n_canaries
    targets = len(result.target_runs) or 1
    eps = epsilon_verdict(
        found["bounds"],
        ceiling=found["ceilings"],
        claim=claim,
        delta=found["delta"],
        confidence=found["confidence"],
        n_canaries=n_canaries,
        per_target=n_canaries // targets if n_canaries else None,
        rule=found["rule"],
        chosen_by=found.get("chosen_by"),
    )
    return one_decision(eps, found.get("mechanism"), level=found["confidence"])


#: how a verdict names the tests that rejected the claim (`Verdict.rejected_by`)
TEST_NAMES = {EPS_TEST: "the f_{ε,δ} test", OWN_CURVE: "the own curve's test"}


def one_decision(eps: Verdict, own: Mapping | None, *, level: float) -> Verdict:
    """The one decision of an audit's tests (`audit.stats.guesses.verdict_levels`) from `eps`, the f_{ε,δ} verdict at
    `level`, and `own`, the claimed mechanism's own-curve test at its recorded level (None: `eps` stands alone).
    Violated if either rejects, at 1 - the sum of the errors (Bonferroni); otherwise the ε verdict's words stand, the
    own curve's outcome added to its reason. `rejected_by` names the rejecting tests."""
    by_eps = (EPS_TEST,) if eps.kind == EPSILON_VIOLATED else ()
    if own is None or eps.kind == NO_FAIR_COINS:
        return replace(eps, rejected_by=by_eps)
    rejected = by_eps + ((OWN_CURVE,) if own["rejected"] else ())
    total = 1.0 - (1.0 - level) - (1.0 - own["confidence"])
    split = (
        f"one decision of two tests, the f_{{ε,δ}} test at {percent(level)} and the own curve's at "
        f"{percent(own['confidence'])}, violated if either rejects: {percent(total)} together (Bonferroni)"
    )
    own_words = (
        f"the claimed mechanism's own curve is rejected ({own['attack'] or 'every attack'}): the implementation "
        f"leaks more than its own accounting allows, ε ≥ {own['eps_lower']:.2f} relative to its family"
        if own["rejected"]
        else "the own curve's test does not reject the claimed mechanism"
    )
    if not rejected:
        return replace(eps, reason=f"{eps.reason}; {own_words}; {split}")
    names = " and ".join(TEST_NAMES[test] for test in rejected)
    reason = f"{eps.reason}; {own_words}" if by_eps else f"{own_words}; the f_{{ε,δ}} test: {eps.text}, {eps.reason}"
    return replace(
        eps,
        kind=EPSILON_VIOLATED,
        text=f"{'claimed ε' if by_eps else 'claim'} violated at {percent(total)} confidence, by {names}",
        reason=f"{reason}; {split}",
        evidence=tuple(dict.fromkeys([*eps.evidence, *([own["attack"]] if own["rejected"] and own["attack"] else [])])),
        rejected_by=rejected,
    )


def summary_verdict(summary: Mapping) -> Verdict | None:
    """The ε verdict of an audit already made, re-read from its summary.json: `audit_verdict`
    against the claim summary.json records (`AuditResult.checked_claim`: a claimed ε, else the
    formal ε; none: "no ε claim was checked"), the verdict its terminal printed."""
    result = AuditResult.from_json(summary)
    return audit_verdict(result, result.checked_claim())


def no_fair_coins_verdict(why: str) -> Verdict:
    """No ε verdict: the membership was not drawn by independent fair coins (`why`: how it was, and what follows)."""
    return Verdict(NO_FAIR_COINS, "no ε verdict: membership was not drawn by independent fair coins", why)


def duplicate_canaries_verdict(why: str) -> Verdict:
    """No ε verdict for duplicate canaries drawn by fair coins: each is several identical rows moved
    by one coin, which a per-record ε does not bound (`why`: summary.json's note)."""
    return Verdict(NO_FAIR_COINS, "no ε verdict: each duplicate canary is several rows moved by one coin", why)


def _design(n_canaries: int | None, per_target: int | None, delta: float) -> str:
    return (f"{_canaries(n_canaries, per_target)}; " if n_canaries else "") + f"δ = {delta:g}"


def _canaries(n_canaries: int, per_target: int | None) -> str:
    """The m canaries a bound is over, and what they are: "12,000 canaries, i.e. 1,500 coin-drawn
    records × 8 target runs" (every pool example of a target run, or the canaries planted in it)."""
    counted = count(n_canaries, "canary", "canaries")
    if not per_target or n_canaries % per_target:
        return counted
    return f"{counted}, i.e. {per_target:,} coin-drawn records × {count(n_canaries // per_target, 'target run')}"


def _paid(rule: str, k: int, confidence: float, chosen_by: str | None = None) -> str:
    """How the verdict's bounds hold at `confidence`, in words (`chosen_by`: summary.json's
    `verdict.chosen_by`, "fixed" where the reference runs predicted no bound for any attack, "declared"
    where `--verdict-attack` named the attack)."""
    if rule == "tuned" and chosen_by == "fixed":
        return (
            "the reference runs predicted no bound for any attack, so the attack and its guess count were fixed "
            f"before the audit (half of its guesses IN), and its one bound holds at {percent(confidence)}"
        )
    if rule == "tuned" and chosen_by == "declared":
        return (
            "the attack was declared before the audit (--verdict-attack) and its guess count chosen on the reference "
            f"runs before any target was judged, so its one bound holds at {percent(confidence)}"
        )
    if rule == "tuned":
        return (
            f"the attack, its query views and its guess count were chosen on the reference runs before any "
            f"target was judged, so its one bound holds at {percent(confidence)}"
        )
    each = 1 - (1 - confidence) / k
    return f"{each:.2%} per attack, {percent(confidence)} jointly over {count(k, 'attack')} (Bonferroni)"


def _what_would_test(
    claimed: float,
    *,
    delta: float,
    confidence: float,
    n_canaries: int | None,
    per_target: int | None,
    rule: str = "grid",
) -> str:
    needed = canaries_needed(claimed, rule=rule, delta=delta, confidence=confidence, most=MOST_CANARIES)
    if needed is None:
        if delta > 0:
            return (
                f"One-run auditing cannot certify more than ε ≈ "
                f"{most_certifiable(rule=rule, delta=delta, confidence=confidence):.2f} at "
                f"δ = {delta:g} with up to {MOST_CANARIES:,} canaries, so this claim cannot be tested this way."
            )
        return f"More than {count(MOST_CANARIES, 'canary', 'canaries')} would be needed to test it."
    if delta > 0 and n_canaries is not None and needed < n_canaries:
        return (
            f"About {count(needed, 'canary', 'canaries')} (the first power of 2 that suffices) would make it "
            f"testable: at δ = {delta:g} the bound's 2mδ term grows with the m = {n_canaries:,} canaries, so fewer "
            "test more."
        )
    runs = (
        f", i.e. {count(math.ceil(needed / per_target), 'target run')} of {count(per_target, 'example')},"
        if per_target
        else ""
    )
    about = f"About {count(needed, 'canary', 'canaries')} (the first power of 2 that suffices)"
    return f"{about}{runs} would make it testable."


def _ceilings(bounds: Mapping[str, float], ceiling: float | Mapping[str, float]) -> dict[str, float]:
    if isinstance(ceiling, Mapping):
        missing = [a for a in bounds if a not in ceiling]
        if missing:
            raise ValueError(f"no ceiling for attack {missing[0]!r}")
        return {a: float(ceiling[a]) for a in bounds}
    if not (isinstance(ceiling, (int, float)) and ceiling >= 0):
        raise ValueError(f"ceiling must be a number >= 0 or one per attack, got {ceiling!r}")
    return {a: float(ceiling) for a in bounds}


def _best(bounds: Mapping[str, float]) -> tuple[str, float] | None:
    if not bounds:
        return None
    return max(bounds.items(), key=lambda item: item[1])


def subset_verdict(tests: Sequence[MetricComparison], *, baseline_label: str, alpha: float) -> Verdict:
    """The baseline verdict from `audit.compare` tests of victim - subset (Holm-adjusted already).

    Only the pooled group ("all") of each attack counts. A gain is a privacy metric
    significantly lower than the subset's.
    """
    privacy = [t for t in tests if t.attack is not None and t.group == "all" and t.metric in PRIVACY_METRICS]
    if not privacy:
        raise ValueError("subset_verdict needs at least one attack metric compared with the subset")
    gains = [t for t in privacy if t.significant and t.difference.point < 0]
    losses = [t for t in privacy if t.significant and t.difference.point > 0]
    accuracy = _accuracy_note(next((t for t in tests if t.metric == "test_accuracy"), None), baseline_label)
    family = f"{count(len(tests), 'Holm-adjusted test')} at α = {alpha:g}"
    if gains:
        return Verdict(
            GAIN_OVER_SUBSET,
            "measurably less leakage than a random real subset of the same size",
            _after(accuracy, f"significantly lower than {baseline_label} on {_list(gains)} ({family})"),
            evidence=tuple(_key(t) for t in gains),
        )
    none = "the one attack metric is not" if len(privacy) == 1 else f"none of the {len(privacy)} attack metrics is"
    reason = _after(accuracy, f"{none} significantly lower than {baseline_label}'s ({family})")
    if losses:
        reason += f"; it leaks significantly more on {_list(losses)}"
    return Verdict(
        NO_GAIN_OVER_SUBSET,
        "no measurable advantage over publishing a random real subset of the same size",
        reason,
        evidence=tuple(_key(t) for t in losses),
    )


def no_subset_verdict(why: str) -> Verdict:
    """The baseline question, not checked (`why` says what was missing)."""
    return Verdict(NO_SUBSET_BASELINE, "not compared with a random real subset of the same size", why)


def format_p(p: float) -> str:
    """A p-value for people: three significant digits, and "< 1e-6" below SMALLEST_P."""
    return "< 1e-6" if p < SMALLEST_P else f"= {p:.3g}"


def rate_words(fpr: float | str) -> str:
    """A false-positive rate as people say it: 0.01 -> "1 in 100", 0.001 -> "1 in 1,000"."""
    return f"1 in {round(1 / float(fpr)):,}"


def release_leakage_verdict(leakage: dict, *, epsilon: dict | None, no_epsilon: str | None) -> Verdict:
    """How much a release leaks, in words (summary.json's `release_leakage`): the members the strongest attack finds at
    reference-set thresholds for 1 in 1,000 and 1 in 100 non-members flagged, with the counts; then the ε lower bound
    when the coins allow one (`epsilon`, at the claim's δ or the audit's), else `no_epsilon`, why not. A figure at
    chance says so; warnings of too few reference runs end the reason."""
    tenth, one = leakage["release"]["0.001"], leakage["release"]["0.01"]
    attack = leakage["strongest"]

    def counts(f: dict) -> str:
        return (
            f"{f['members_flagged']:,} of your {count(f['members'], 'member')} ({f['tpr']:.1%}) and wrongly flags "
            f"{f['nonmembers_flagged']:,} of your {count(f['nonmembers'], 'non-member')} ({f['realised_fpr']:.1%})"
        )

    reason = (
        f"{attack} is the strongest attack on the {count(leakage['pseudo_targets'], 'reference run')} "
        f"({leakage['rule']}), "
        f"chosen before your membership was looked at. At the threshold set there for 1 in 1,000 non-members it finds "
        f"{counts(tenth)}; at 1 in 100, {counts(one)}. "
    )
    if epsilon:
        reason += (
            f"ε ≥ {epsilon['eps_lower']:.2f} at {epsilon['confidence']:.0%} confidence (δ = {epsilon['delta']:g}; "
            f"{epsilon['attack']}, {_paid(epsilon['rule'], len(epsilon['bounds']), epsilon['confidence'])}), where "
            f"a perfect attack would reach ε ≈ {epsilon['eps_ceiling']:.2f} with this design."
        )
    else:
        reason += f"No ε bound: {no_epsilon}."
    text = (
        f"an attacker who wrongly flags 1 in 1,000 non-members finds {tenth['tpr']:.1%} of your members "
        f"(1 in 100: {one['tpr']:.1%})"
    )
    chance = [rate for rate in ("0.001", "0.01") if rate in leakage.get("at_chance", ())]
    if chance:  # the members found are not significantly more than the non-members wrongly flagged
        words = " or ".join(rate_words(rate) for rate in chance)
        text += f": no better than guessing at {words}"
        tests = "; ".join(f"{rate_words(r)}: p {format_p(leakage['release'][r]['p_guessing'])}" for r in chance)
        reason += (
            f" At {words} it is no better than guessing: the members found are not significantly more than the "
            f"non-members wrongly flagged ({leakage['guessing_test']}; {tests}; α = {leakage['alpha']:g})."
        )
    for warning in leakage.get("warnings", ()):  # too few reference runs for a figure, or for the attack choice
        reason += f" Warning: {warning}."
    return Verdict(RELEASE_LEAKAGE, text, reason, evidence=(attack,))


def release_subset_verdict(comparison: dict) -> Verdict:
    """Is this release better than publishing a random real subset of the same size? The release's
    TPR against the subset runs' (summary.json's `subset_baseline`, `audit.releases.leakage`)."""
    if comparison.get("outcome") is None:
        return no_subset_verdict(comparison.get("reason") or "no subset runs")
    n = len(comparison["subset_tpr"])
    test = comparison["test"]
    reason = (
        f"your release's {comparison['statistic']}: {comparison['release_tpr']:.1%}; "
        f"{count(n, 'random real subset')} of the same size on the same pool: median "
        f"{comparison['subset_median']:.1%}, 5th-95th percentiles {comparison['subset_p5']:.1%}-"
        f"{comparison['subset_p95']:.1%} ({comparison['subsets_below_release']} of {n} below yours); {test}: "
        f"t = {comparison['t']:.2f}, p {format_p(comparison['p'])} (α = {comparison['alpha']:g})"
    )
    if comparison["outcome"] == "less":
        return Verdict(GAIN_OVER_SUBSET, "measurably less leakage than a random real subset of the same size", reason)
    if comparison["outcome"] == "more":
        return Verdict(MORE_THAN_SUBSET, "measurably more leakage than a random real subset of the same size", reason)
    return Verdict(NO_GAIN_OVER_SUBSET, "no measurable difference from a random real subset of the same size", reason)


def _key(test: MetricComparison) -> str:
    return f"{test.attack}/{test.metric}"


def _list(tests: Sequence[MetricComparison]) -> str:
    return ", ".join(
        f"{t.attack} {t.metric} ({t.difference.point:+.3g}, adjusted p {format_p(t.p_adjusted)})" for t in tests
    )


def _after(note: str, text: str) -> str:
    """`text` after the sentence `note` (capitalised there), or as it is without one."""
    return f"{note}{text[0].upper()}{text[1:]}" if note else text


def _accuracy_note(test: MetricComparison | None, baseline_label: str) -> str:
    """The utility cost first, a sentence of its own: "Test accuracy -0.012 against subset ipc=1 (...). " """
    if test is None:
        return ""
    change = (
        "no significant difference"
        if not test.significant
        else ("significantly higher" if test.difference.point > 0 else "significantly lower")
    )
    return (
        f"Test accuracy {test.difference.point:+.3f} against {baseline_label} ({change}, adjusted p "
        f"{format_p(test.p_adjusted)}). "
    )
