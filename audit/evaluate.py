"""From the run store to per-attack scores and metrics: each target run against the reference runs as
shadows; and what the reference runs, as pseudo-targets, choose before any target is judged (the
query views an attack averages and the guess counts of its one-run bounds, `choose_on_references`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from attacks import cross_entropy, dcr_scores, logit_confidence
from attacks.ganleak import RECON_KINDS
from attacks.registry import get_attack
from attacks.tabular import ReleaseStatistics, TableColumns, release_statistics
from audit.stats.bounds import MECHANISM, SUMMARY_KEYS, VERDICT_BOUND
from audit.stats.epsilon import bound_applies
from audit.stats.guesses import EPS_TEST, BoundCache, RankedGuesses, applicable, tune, verdict_levels
from audit.stats.mechanism import SubsampledGaussian
from audit.stats.metrics import MembershipScores
from shadow_runs.plan import shadow_mask
from shadow_runs.records import CanaryColumns
from shadow_runs.store import RunStore

#: the query views an attack that reads per-view confidences may average: all of them (the image
#: and its shifted copies), or the image alone. Chosen per attack on the reference runs.
VIEWS = ("all", "image")
#: reference runs scored as pseudo-targets (the first ones; each against the other references)
MOST_PSEUDO_TARGETS = 32
#: `reference_choice`'s key for the verdict's bound predicted on the pseudo-targets
PREDICTED_KEY = f"predicted_{VERDICT_BOUND.lower_key}"
#: `reference_choice`'s key for the own curve's prediction on the pseudo-targets: the Gaussian family's μ at the
#: count tuned for that test (`audit.stats.guesses.tune`), what `mechanism_attack` compares across attacks
PREDICTED_MECHANISM_KEY = f"predicted_mu_{MECHANISM.name}"


@dataclass(frozen=True, eq=False)
class TablePool:
    """A tabular pool as the table attacks read it (`attacks.tabular`): its schema's public column
    facts, and its records as values and as cells of the discrete domain (D columns, the label last)."""

    schema: object  # victims.tabular.schema.Schema
    columns: TableColumns
    values: np.ndarray  # float64 [n, D]
    codes: np.ndarray  # int64 [n, D]

    @classmethod
    def of(cls, schema, x: np.ndarray, y: np.ndarray) -> TablePool:
        """The pool's records x [n, d], y [n] under `schema`: its features' kinds and public bounds (a
        number's span upper - lower, never the data's range), the label a categorical column."""
        span = [1.0 if c.kind == "categorical" else float(c.upper) - float(c.lower) for c in schema.features]
        columns = TableColumns(
            categorical=np.append(schema.categorical, True),
            span=np.array([*span, 1.0]),
            sizes=np.array(schema.domain_sizes),
        )
        return cls(schema, columns, _table_values(x, y), schema.codes(x, y))

    def statistics(self, release_x: np.ndarray, release_y: np.ndarray) -> ReleaseStatistics:
        """What a released table (x [k, d], y [k]) gives at every pool record (`attacks.tabular.release_statistics`)."""
        return release_statistics(
            self.values,
            self.codes,
            _table_values(release_x, release_y),
            self.schema.codes(release_x, release_y),
            self.columns,
        )


def _table_values(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.column_stack([np.asarray(x, dtype=np.float64).reshape(len(x), -1), np.asarray(y, dtype=np.float64)])


@dataclass(frozen=True, eq=False)
class StoredRuns:
    """The per-run arrays the attacks need, reduced as each run is read (memory ~ R x n x Q)."""

    keep: np.ndarray  # bool [R, n]
    confidence: np.ndarray  # float64 [R, n, Q]: LiRA's logit-scaled confidence per query view
    loss: np.ndarray  # float64 [R, n]: cross-entropy on the image itself
    init_mask: np.ndarray  # bool [R, n]: the real images a run's release contains or started from
    meta: tuple[dict, ...]  # runs/<r>.json of each run
    dcr: np.ndarray | None = None  # float64 [R, n]: DCR scores against each run's release, if every run has one
    recon: dict[str, np.ndarray] | None = (
        None  # GAN-Leaks kind -> float64 [R, n] reconstruction losses, if every run has them
    )
    whitebox: np.ndarray | None = (
        None  # float32 [R, steps, m]: white-box canary observations (the last m rows), if every run has them
    )
    #: a released table's log kernel density at every pool record [R, n] (`attacks.tabular.gower`), if every
    #: run released a table
    release_density: np.ndarray | None = None
    #: int32 [R, n, Q]: released records matching each pool record per query (`attacks.tabular.queries`), likewise
    release_counts: np.ndarray | None = None
    #: float64 [R, n, D]: per column, released records only that pool record could have put there
    #: (`attacks.tabular.support`)
    release_support: np.ndarray | None = None
    #: float64 [R, n]: released records on the pairs of columns only that pool record holds (likewise)
    release_pair_support: np.ndarray | None = None

    @classmethod
    def load(
        cls, store: RunStore, *, keep: np.ndarray, images: np.ndarray, labels: np.ndarray, schema=None
    ) -> StoredRuns:
        """Read every run of the plan `keep`; `images` [n, c, h, w] (a table's records [n, d]) and
        `labels` [n] are the pool's, `schema` a tabular pool's (`Pool.schema`), None for images. A
        table's release gives `dcr` on Gower's distance, `release_density`, `release_counts`, `release_support`
        and `release_pair_support` (`TablePool`); an image release gives `dcr` on the pixels (`attacks.dcr`)."""
        n_runs = len(keep)
        confidence, loss, dcr, init_mask, meta, whitebox = [], [], [], np.zeros(keep.shape, dtype=bool), [], []
        recon = {kind: [] for kind in RECON_KINDS}
        table = None if schema is None else TablePool.of(schema, images, labels)
        density, counts, support, pairs = [], [], [], []
        for r in range(n_runs):
            arrays, run_meta = store.load_run(r)
            confidence.append(logit_confidence(arrays["logits"], labels))
            loss.append(cross_entropy(arrays["logits"][:, 0, :], labels))
            if "release_x" in arrays and table is not None:
                found = table.statistics(arrays["release_x"], arrays["release_y"])
                dcr.append(found.dcr)
                density.append(found.log_density)
                counts.append(found.counts)
                support.append(found.support)
                pairs.append(found.pair_support)
            elif "release_x" in arrays:
                dcr.append(dcr_scores(images, labels, arrays["release_x"], arrays["release_y"]))
            for kind in RECON_KINDS:
                if f"recon_loss_{kind}" in arrays:
                    recon[kind].append(arrays[f"recon_loss_{kind}"].astype(np.float64))
            if "whitebox" in arrays:
                whitebox.append(arrays["whitebox"])
            init_mask[r, arrays["init_idx"]] = True
            meta.append(run_meta)
        return cls(
            keep=keep,
            confidence=np.stack(confidence),
            loss=np.stack(loss),
            init_mask=init_mask,
            meta=tuple(meta),
            dcr=np.stack(dcr) if len(dcr) == n_runs else None,
            recon={k: np.stack(v) for k, v in recon.items() if len(v) == n_runs} or None,
            whitebox=np.stack(whitebox) if len(whitebox) == n_runs else None,
            release_density=np.stack(density) if len(density) == n_runs else None,
            release_counts=np.stack(counts) if len(counts) == n_runs else None,
            release_support=np.stack(support) if len(support) == n_runs else None,
            release_pair_support=np.stack(pairs) if len(pairs) == n_runs else None,
        )

    @property
    def whitebox_rows(self) -> np.ndarray:
        """The pool rows the white-box observations are of: the canaries, the last m rows."""
        n, m = self.keep.shape[1], self.whitebox.shape[2]
        return np.arange(n - m, n)

    def available(self, attacks: tuple[str, ...]) -> tuple[str, ...]:
        """`attacks` less those whose needs these runs do not hold (`attacks.registry`): the release attacks when the
        runs stored no release, the GAN-Leaks attacks whose reconstruction losses the runs did not store."""
        return tuple(a for a in attacks if get_attack(a).available(self))

    def with_views(self, views: str) -> StoredRuns:
        """These runs with the confidences of `views` only ("all", or "image": the first view)."""
        if views not in VIEWS:
            raise ValueError(f"views must be one of {VIEWS}, got {views!r}")
        return self if views == "all" else replace(self, confidence=self.confidence[..., :1])


def attack_scores(
    runs: StoredRuns, attack: str, targets: np.ndarray, *, variance: str, views: str = "all"
) -> np.ndarray:
    """Scores [T, n] of the registered `attack` on each target run, averaging `views` (for an attack with query views);
    its shadows are the reference runs (every run that is not a target), so no target's coins enter any guess."""
    spec = get_attack(attack)
    if not spec.available(runs):
        raise ValueError(spec.missing())
    shadows = shadow_mask(len(runs.keep), targets) if spec.calibrated else None
    return spec.score(runs.with_views(views), targets, shadows, variance)


def pseudo_targets(n_runs: int, targets: np.ndarray, *, most: int = MOST_PSEUDO_TARGETS) -> np.ndarray:
    """The reference runs scored as pseudo-targets: the first `most` runs that are not targets."""
    references = np.setdiff1d(np.arange(n_runs), np.asarray(targets, dtype=np.int64))
    return references[:most]


def pseudo_target_scores(
    runs: StoredRuns, attack: str, targets: np.ndarray, *, variance: str, views: str, most: int = MOST_PSEUDO_TARGETS
) -> tuple[np.ndarray, np.ndarray]:
    """(pseudo-target runs [P], scores [P, n]): each of the first `most` reference runs scored as a target, the other
    reference runs its shadows; no target run enters."""
    spec = get_attack(attack)
    pseudo = pseudo_targets(len(runs.keep), targets, most=most)
    viewed = runs.with_views(views)
    if not spec.calibrated:
        return pseudo, spec.score(viewed, pseudo, None, variance)
    references = shadow_mask(len(runs.keep), targets)[0]
    rows = []
    for run in pseudo:  # one at a time: each pseudo-target's shadows are the references but itself
        shadows = references.copy()
        shadows[run] = False
        rows.append(spec.score(viewed, np.array([run]), shadows[None], variance)[0])
    return pseudo, np.stack(rows)


@dataclass(frozen=True)
class ReferenceChoice:
    """What the reference runs chose for one attack, before any target was judged."""

    views: str  # "all" or "image" ("all" for an attack without query views)
    tuned: dict  # analysis -> Guesses, for the real targets' m
    predicted: float  # the verdict's bound (`VERDICT_BOUND`) the pseudo-targets predict with its tuned count
    z: float  # how far above chance the pseudo-targets' guesses at that count were (tie-break)
    n_pseudo: int  # pseudo-target runs
    # the own curve's (`MECHANISM`) prediction and tie-break at its tuned count, where the runs record a mechanism
    mechanism_predicted: float | None = None
    mechanism_z: float | None = None

    def to_json(self) -> dict:
        found = {"views": self.views, "pseudo_targets": self.n_pseudo, PREDICTED_KEY: self.predicted}
        if self.mechanism_predicted is not None:
            found[PREDICTED_MECHANISM_KEY] = self.mechanism_predicted
        return {**found, "guesses": {a: {"k_in": g.k_in, "k_out": g.k_out} for a, g in self.tuned.items()}}


def can_choose_on_references(runs: StoredRuns, attack: str, targets: np.ndarray) -> bool:
    """Whether enough reference runs remain for `attack` to score pseudo-targets: two at least, and
    as many as the attack needs runs (a pseudo-target's shadows are the other references)."""
    n_references = len(runs.keep) - len(np.asarray(targets).reshape(-1))
    return n_references >= max(2, get_attack(attack).min_runs)


def choose_on_references(
    runs: StoredRuns,
    attack: str,
    targets: np.ndarray,
    *,
    variance: str,
    columns,
    m: int,
    delta: float,
    confidence: float,
    mechanism: SubsampledGaussian | None = None,
) -> ReferenceChoice | None:
    """Score the reference runs as pseudo-targets on `columns` (every example, or the canary records) and choose from
    their public coins alone: the views (the variant with the larger predicted `VERDICT_BOUND`, then further above
    chance), and per registered bound the guess count for the targets' `m` (`audit.stats.guesses.tune`; the claimed
    mechanism's curve too when the runs record one). None if too few references remain (`can_choose_on_references`): the
    audit then uses the grid."""
    if not can_choose_on_references(runs, attack, targets):
        return None
    spec = get_attack(attack)
    best: ReferenceChoice | None = None
    for views in VIEWS if spec.query_views else VIEWS[:1]:
        pseudo, scores = pseudo_target_scores(runs, attack, targets, variance=variance, views=views)
        scores, keep = scores[:, columns], runs.keep[pseudo][:, columns]
        scored = ~np.isnan(scores)
        if not (keep & scored).any() or not (~keep & scored).any():
            return None
        ranked = RankedGuesses.of(scores[keep & scored], scores[~keep & scored], rng=np.random.default_rng(0))
        cache = BoundCache()  # the own curve's count is the Gaussian family's (`tune`): tuned once
        tuned = {
            a: tune(ranked, m=m, analysis=a, delta=delta, confidence=confidence, cache=cache)
            for a in applicable(mechanism, delta)
        }
        verdict, own = tuned[VERDICT_BOUND.name], tuned.get(MECHANISM.name)
        choice = ReferenceChoice(
            views,
            {a: t.guesses for a, t in tuned.items()},
            verdict.predicted,
            verdict.z,
            len(pseudo),
            None if own is None else own.predicted,
            None if own is None else own.z,
        )
        if best is None or (choice.predicted, choice.z) > (best.predicted, best.z):
            best = choice
    return best


def attack_summary(
    scores: np.ndarray,
    membership: np.ndarray,
    init_mask: np.ndarray,
    *,
    delta: float,
    confidence: float,
    seed: int | list[int],
    fair_coins: bool = True,
    canaries: CanaryColumns | None = None,
    natural_group: bool = True,
    choice: ReferenceChoice | None = None,
    mechanism: SubsampledGaussian | None = None,
) -> dict:
    """Metrics of scores [T, n] pooled over targets, with the one-run ε bound and ceiling when the plan's coins are fair
    (`fair_coins`; else `eps_lower` and `eps_ceiling` are null).

    Sub-groups (the release's initial real images, the other members) carry leakage statistics only, no ε: conditioning
    on the mechanism's choice can raise TPR/FPR by up to 1/P(choice). With `canaries`, the top level is the canary
    records, each scored on its first row, and `natural` the natural examples (descriptive). A duplicate canary moves
    several rows with one coin, which no per-record ε bounds: its ε keys are null. Guess counts come from `choice`
    ("tuned") or the grid (always for `natural`); ties break in the order `seed` draws. `mechanism` adds its own curve's
    bound.
    """
    tuned = None if choice is None else choice.tuned
    if canaries is None:
        return _group_summary(
            scores,
            membership,
            init_mask,
            delta=delta,
            confidence=confidence,
            rng=np.random.default_rng(seed),
            epsilon=fair_coins,
            tuned=tuned,
            tie_rng=tie_order(seed),
            mechanism=mechanism,
        )
    canary_cols, natural_cols = canaries.scored, canaries.natural
    canary_rng, natural_rng = np.random.default_rng(seed).spawn(2)
    summary = _group_summary(
        scores[:, canary_cols],
        membership[:, canary_cols],
        None,
        delta=delta,
        confidence=confidence,
        rng=canary_rng,
        epsilon=fair_coins and canaries.single_rows,
        tuned=tuned,
        tie_rng=tie_order(seed),
        mechanism=mechanism,
    )
    if not natural_group or np.isnan(scores[:, natural_cols]).all():  # a white-box attack scores the canaries only
        return summary
    natural = _group_summary(
        scores[:, natural_cols],
        membership[:, natural_cols],
        init_mask[:, natural_cols],
        delta=delta,
        confidence=confidence,
        rng=natural_rng,
        epsilon=fair_coins,
    )
    subgroups = natural.pop("subgroups", None)
    summary["natural"] = natural
    if subgroups is not None:
        summary["subgroups"] = subgroups
    return summary


def tie_order(seed) -> np.random.Generator:
    """The generator that orders tied scores for the top-level bounds of one attack: seeded by
    `seed` (the master seed and the attack's name) alone, independent of the coins."""
    return np.random.default_rng(seed)


def _group_summary(
    scores: np.ndarray,
    membership: np.ndarray,
    init_mask: np.ndarray | None,
    *,
    delta: float,
    confidence: float,
    rng: np.random.Generator,
    epsilon: bool,
    tuned: dict | None = None,
    tie_rng: np.random.Generator | None = None,
    mechanism: SubsampledGaussian | None = None,
) -> dict:
    """`attack_summary` of one group of examples (columns), sub-groups by `init_mask` if given."""
    scored = ~np.isnan(scores)  # an attack may score only some examples (ganleak_pbb); the others are NaN
    nonmember = scores[~membership & scored]
    membership = membership & scored
    pooled = MembershipScores(scores[membership], nonmember)
    if tuned is not None and max(g.total for g in tuned.values()) > pooled.member.size + pooled.nonmember.size:
        tuned = None  # fewer canaries scored than the targets' m the counts were tuned for (a partial attack)
    summary = pooled.summary(
        delta=delta, confidence=confidence, rng=rng, epsilon=epsilon, tuned=tuned, tie_rng=tie_rng, mechanism=mechanism
    )
    if not epsilon:
        summary.update(
            {
                "eps_hat": float(pooled.eps_hat()),
                **{key: None for key in SUMMARY_KEYS},
                "confidence": float(confidence),
                "delta": float(delta),
            }
        )
    if init_mask is not None and (init_mask & scored).any():
        init_mask = init_mask & scored
        groups = {"init": membership & init_mask, "other_members": membership & ~init_mask}
        summary["subgroups"] = {
            name: MembershipScores(scores[mask], nonmember).summary(rng=rng, epsilon=False)
            for name, mask in groups.items()
            if mask.sum() >= 2  # the advantage needs two scores per side
        }
    return summary


def score_attacks(
    runs: StoredRuns,
    attacks: tuple[str, ...],
    targets: np.ndarray,
    *,
    variance: str,
    columns,
    delta: float,
    confidence: float,
    bounded: bool,
) -> tuple[dict, dict]:
    """(attack -> scores [T, n], attack -> ReferenceChoice or None) for the attacks these runs can score. When the
    top-level group (`columns`) is `bounded`, each attack's views and guess counts are first chosen on the reference
    runs (`choose_on_references`), including the claimed mechanism's own curve where the targets record one, each tuned
    at its test's level (`verdict_levels`); otherwise every view, no choice."""
    columns = np.arange(runs.keep.shape[1])[columns]
    mechanism = claimed_mechanism(runs.meta, targets)
    level = verdict_levels(mechanism, delta, confidence)[EPS_TEST]
    m = len(np.asarray(targets).reshape(-1)) * len(columns)
    scores, choices = {}, {}
    for attack in runs.available(attacks):
        choice = (
            choose_on_references(
                runs,
                attack,
                targets,
                variance=variance,
                columns=columns,
                m=m,
                delta=delta,
                confidence=level,
                mechanism=mechanism,
            )
            if bounded
            else None
        )
        scores[attack] = attack_scores(
            runs, attack, targets, variance=variance, views=choice.views if choice else "all"
        )
        choices[attack] = choice
    return scores, choices


def verdict_attack(choices: dict) -> str | None:
    """The attack the verdict uses, chosen on the reference runs alone: the largest predicted `VERDICT_BOUND`, then the
    distance above chance, then registry order. None when no attack could be tuned (the verdict then pays for every
    attack, Bonferroni). When every prediction is 0 (`untold`), the verdict takes `fixed_attack`."""
    tuned = [(c.predicted, c.z, -i, a) for i, (a, c) in enumerate(choices.items()) if c is not None]
    return max(tuned)[3] if tuned else None


#: the attack a verdict takes when the reference runs predict 0 for every attack (`untold`): the
#: loss, which needs no reference run, fixed before any run is trained
FIXED_ATTACK = "loss"


def untold(choices: dict, chosen: str | None, *, own_curve: bool = False) -> bool:
    """Whether the reference runs could not tell the attacks apart: the chosen attack (the largest
    prediction: `verdict_attack`, or `mechanism_attack` with `own_curve`) predicts 0, so every
    attack does, and the choice among them would fall to a tie-break on the pseudo-targets' noise."""
    if chosen is None:
        return False
    predicted = choices[chosen].mechanism_predicted if own_curve else choices[chosen].predicted
    return predicted is not None and predicted <= 0.0


def fixed_attack(choices: dict) -> str:
    """The attack fixed in advance for an untold choice: `FIXED_ATTACK` where it was run, else the first in registry
    order. With `audit.stats.guesses.fixed_count` (a function of m alone) no choice reads any coin, so the one-run tests
    apply at their full level (Steinke, Nasr & Jagielski 2023, Theorem 3.1; Mahloujifar, Melis & Chaudhuri 2024)."""
    return FIXED_ATTACK if FIXED_ATTACK in choices else next(iter(choices))


def mechanism_attack(choices: dict) -> str | None:
    """The attack for the test of the claimed mechanism's own curve, chosen on the reference runs alone: the largest
    own-curve prediction (`mechanism_predicted`), then the distance above chance, then registry order; None when no
    attack has one (the grid then). The f-DP one-run test (Mahloujifar, Melis and Chaudhuri,
    `audit.stats.guesses.mechanism_verdict`) holds for any attack fixed independently of the targets' coins, as this
    choice is."""
    tuned = [
        (c.mechanism_predicted, c.mechanism_z, -i, a)
        for i, (a, c) in enumerate(choices.items())
        if c is not None and c.mechanism_predicted is not None
    ]
    return max(tuned)[3] if tuned else None


def claimed_mechanism(meta: Sequence[dict], targets) -> SubsampledGaussian | None:
    """The mechanism (`Observations.mechanism`) all target runs' metadata `meta` record alike; else None."""
    records = [meta[int(t)].get("mechanism") for t in np.asarray(targets).reshape(-1)]
    if not records or any(r is None or r != records[0] for r in records):
        return None
    return SubsampledGaussian.of(records[0])


def run_delta(meta: Sequence[dict]) -> float | None:
    """The runs' δ (from their metadata `meta`): the first a run reports; None for a non-DP victim (bounds at δ = 0)."""
    return next((m["delta"] for m in meta if m.get("delta") is not None), None)


def top_level_bounded(inclusion_rate: float, canaries: CanaryColumns | None) -> bool:
    """Whether an audit's top-level group gets one-run bounds: fair coins, and canaries (if any)
    of one row each (a duplicate canary moves several rows with one coin)."""
    return bound_applies(inclusion_rate) and (canaries is None or canaries.single_rows)
