"""From the run store to per-attack scores and metrics: each target run against the reference runs as shadows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attacks import cross_entropy, dcr_scores, logit_confidence
from attacks.ganleak import RECON_KINDS
from attacks.registry import get_attack
from audit.stats.metrics import MembershipScores
from shadow_runs.plan import shadow_mask
from shadow_runs.records import CanaryColumns
from shadow_runs.store import RunStore

@dataclass(frozen=True, eq=False)
class StoredRuns:
    """The per-run arrays the attacks need, reduced as each run is read (memory ~ R x n x Q)."""

    keep: np.ndarray  # bool [R, n]
    confidence: np.ndarray  # float64 [R, n, Q]: LiRA's logit-scaled confidence per query view
    loss: np.ndarray  # float64 [R, n]: cross-entropy on the image itself
    init_mask: np.ndarray  # bool [R, n]: the real images a run's release contains or started from
    meta: tuple[dict, ...]  # runs/<r>.json of each run
    dcr: np.ndarray | None = None  # float64 [R, n]: DCR scores against each run's release, if every run has one
    recon: dict[str, np.ndarray] | None = None  # GAN-Leaks kind -> float64 [R, n] reconstruction losses, if every run has them

    @classmethod
    def load(cls, store: RunStore, *, keep: np.ndarray, images: np.ndarray, labels: np.ndarray) -> StoredRuns:
        """Read every run of the plan `keep`; `images` [n, c, h, w] and `labels` [n] are the pool's."""
        n_runs = len(keep)
        confidence, loss, dcr, init_mask, meta = [], [], [], np.zeros(keep.shape, dtype=bool), []
        recon = {kind: [] for kind in RECON_KINDS}
        for r in range(n_runs):
            arrays, run_meta = store.load_run(r)
            confidence.append(logit_confidence(arrays["logits"], labels))
            loss.append(cross_entropy(arrays["logits"][:, 0, :], labels))
            if "release_x" in arrays:
                dcr.append(dcr_scores(images, labels, arrays["release_x"], arrays["release_y"]))
            for kind in RECON_KINDS:
                if f"recon_loss_{kind}" in arrays:
                    recon[kind].append(arrays[f"recon_loss_{kind}"].astype(np.float64))
            init_mask[r, arrays["init_idx"]] = True
            meta.append(run_meta)
        return cls(keep=keep, confidence=np.stack(confidence), loss=np.stack(loss), init_mask=init_mask,
                   meta=tuple(meta), dcr=np.stack(dcr) if len(dcr) == n_runs else None,
                   recon={k: np.stack(v) for k, v in recon.items() if len(v) == n_runs} or None)

    def available(self, attacks: tuple[str, ...]) -> tuple[str, ...]:
        """`attacks` less those whose needs these runs do not hold (`attacks.registry`): the release
        attacks when the runs stored no release, the GAN-Leaks attacks whose reconstruction losses
        the runs did not store."""
        return tuple(a for a in attacks if get_attack(a).available(self))


def attack_scores(runs: StoredRuns, attack: str, targets: np.ndarray, *, variance: str) -> np.ndarray:
    """Scores [T, n] of the registered `attack` on each target run; its shadows are the reference
    runs (every run that is not a target), so no target's coins enter any guess."""
    spec = get_attack(attack)
    if not spec.available(runs):
        raise ValueError(spec.missing())
    shadows = shadow_mask(len(runs.keep), targets) if spec.calibrated else None
    return spec.score(runs, targets, shadows, variance)


def attack_summary(
    scores: np.ndarray, membership: np.ndarray, init_mask: np.ndarray, *, delta: float, confidence: float,
    seed: int | list[int], fair_coins: bool = True, canaries: CanaryColumns | None = None,
) -> dict:
    """Metrics of scores [T, n] pooled over targets, with the one-run ε bound and ceiling when the
    plan's coins are fair (`fair_coins`; otherwise `eps_lower` and `eps_ceiling` are null).

    Sub-groups, when the runs used real images to initialise (or make up) their release: those
    images against all non-members, and the other members against all non-members. They carry
    leakage statistics only, no ε: the mechanism itself chose those images among the members,
    and conditioning on its choice can raise TPR/FPR by up to 1/P(choice).

    With canaries (`canaries`: which columns are canary records, `shadow_runs.records`), the top level is the canary records only, the audit's
    guesses designated before any training, each record scored on its first row (a duplicate's
    other copies count nowhere); `natural` holds the same summary over the natural examples
    (descriptive), and the sub-groups are natural examples only. A canary record of several rows
    (duplicate) moves them all with one coin, which a per-record ε does not bound: the top level
    then has leakage statistics and `eps_hat` but null `eps_lower` and `eps_ceiling`."""
    if canaries is None:
        return _group_summary(scores, membership, init_mask, delta=delta, confidence=confidence,
                              rng=np.random.default_rng(seed), epsilon=fair_coins)
    canary_cols, natural_cols = canaries.scored, canaries.natural
    canary_rng, natural_rng = np.random.default_rng(seed).spawn(2)
    summary = _group_summary(scores[:, canary_cols], membership[:, canary_cols], None, delta=delta,
                             confidence=confidence, rng=canary_rng, epsilon=fair_coins and canaries.single_rows)
    natural = _group_summary(scores[:, natural_cols], membership[:, natural_cols], init_mask[:, natural_cols],
                             delta=delta, confidence=confidence, rng=natural_rng, epsilon=fair_coins)
    subgroups = natural.pop("subgroups", None)
    summary["natural"] = natural
    if subgroups is not None:
        summary["subgroups"] = subgroups
    return summary


def _group_summary(scores: np.ndarray, membership: np.ndarray, init_mask: np.ndarray | None, *, delta: float,
                   confidence: float, rng: np.random.Generator, epsilon: bool) -> dict:
    """`attack_summary` of one group of examples (columns), sub-groups by `init_mask` if given."""
    scored = ~np.isnan(scores)  # an attack may score only some examples (ganleak_pbb); the others are NaN
    nonmember = scores[~membership & scored]
    membership = membership & scored
    pooled = MembershipScores(scores[membership], nonmember)
    summary = pooled.summary(delta=delta, confidence=confidence, rng=rng, epsilon=epsilon)
    if not epsilon:
        summary.update({"eps_hat": float(pooled.eps_hat()), "eps_lower": None, "eps_ceiling": None,
                        "confidence": float(confidence), "delta": float(delta)})
    if init_mask is not None and (init_mask & scored).any():
        init_mask = init_mask & scored
        groups = {"init": membership & init_mask, "other_members": membership & ~init_mask}
        summary["subgroups"] = {
            name: MembershipScores(scores[mask], nonmember).summary(rng=rng, epsilon=False)
            for name, mask in groups.items()
            if mask.sum() >= 2  # the advantage needs two scores per side
        }
    return summary
