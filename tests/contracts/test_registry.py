"""The attack registry's contract: every registered attack, on stored runs that hold what it needs,
scores each target [T, n] from the target's outputs and the reference runs alone."""

import numpy as np
import pytest

from attacks.registry import FAMILIES, HEADLINE_ATTACK, REGISTRY, RELEASE, WHITEBOX, attack_names, get_attack
from audit.evaluate import StoredRuns, attack_scores
from shadow_runs.plan import membership_matrix

N_RUNS, N, Q, TARGETS = 6, 40, 2, np.array([0, 1])
STEPS, MECHANISM = 30, {"noise_multiplier": 1.0, "sample_rate": 0.5}  # white-box: every row a canary


def stored_runs(
    *,
    release: bool = True,
    recon: tuple[str, ...] = ("fbb", "pbb", "wb"),
    seed: int = 0,
    keep: np.ndarray | None = None,
    whitebox: bool = True,
) -> StoredRuns:
    """Runs whose observations carry a member signal (members score higher), with every array an attack may need."""
    rng = np.random.default_rng(seed)
    keep = membership_matrix(np.zeros(N, dtype=np.int64), n_runs=N_RUNS, master_seed=seed) if keep is None else keep
    signal = keep.astype(float)
    recon_losses = {kind: np.exp(-signal + rng.normal(0, 0.5, (N_RUNS, N))) for kind in recon}
    if "pbb" in recon_losses:
        recon_losses["pbb"][:, N // 2 :] = np.nan  # the partial black-box search reconstructs only some examples
    # white-box observations [R, steps, N]: an IN canary adds 1 in the steps it is sampled (q = 1/2)
    sampled = rng.random((N_RUNS, STEPS, N)) < MECHANISM["sample_rate"]
    observations = (sampled & keep[:, None, :]) + rng.normal(0, MECHANISM["noise_multiplier"], (N_RUNS, STEPS, N))
    return StoredRuns(
        keep=keep,
        confidence=signal[..., None] + rng.normal(0, 1, (N_RUNS, N, Q)),
        loss=1 - signal + rng.normal(0, 0.3, (N_RUNS, N)),
        init_mask=np.zeros((N_RUNS, N), dtype=bool),
        meta=tuple({"whitebox_mechanism": MECHANISM} for _ in range(N_RUNS)),
        dcr=-(1 - signal) + rng.normal(0, 0.3, (N_RUNS, N)) if release else None,
        recon=recon_losses or None,
        whitebox=observations if whitebox else None,
    )


def test_names_are_unique_and_the_fields_are_meaningful():
    names = attack_names()
    assert len(names) == len(set(names)) == len(REGISTRY)
    assert HEADLINE_ATTACK in names
    for attack in REGISTRY:
        assert attack.family in FAMILIES and attack.min_runs >= 1 and attack.about
        # an attack calibrated on reference runs needs one beside each target
        assert attack.min_runs >= 2 if attack.calibrated else attack.min_runs == 1
        assert attack.needs is None if attack.family == "model" else attack.needs is not None


def test_each_command_loops_over_its_families_in_registry_order():
    from audit import ganleak, lira

    assert lira.main.__module__ == "audit.lira"
    assert attack_names("model", "release") == (
        "loss",
        "lira_online",
        "lira_offline",
        "rmia",
        "rmia_offline",
        "dcr",
        "dcr_lira",
    )
    assert ganleak.ATTACKS == attack_names("model", "generator", "mechanism")


@pytest.mark.parametrize("name", attack_names())
def test_an_attack_scores_every_target_and_finds_the_signal(name):
    runs = stored_runs()
    scores = attack_scores(runs, name, TARGETS, variance="fixed")
    assert scores.shape == (len(TARGETS), N)
    scored = ~np.isnan(scores)
    assert scored[:, : N // 2].all()  # NaN only where a search did not reconstruct (pbb's second half)
    member, nonmember = scores[runs.keep[TARGETS] & scored], scores[~runs.keep[TARGETS] & scored]
    assert member.mean() > nonmember.mean()  # the planted signal: members score higher on average


@pytest.mark.parametrize("name", attack_names())
def test_no_guess_depends_on_a_target_s_own_coins(name):
    """Flipping every coin of the targets leaves each target's scores unchanged (its outputs are
    held fixed): the guesses use the target's outputs and the reference runs' public coins only."""
    runs = stored_runs()
    flipped_keep = runs.keep.copy()
    flipped_keep[TARGETS] = ~flipped_keep[TARGETS]
    flipped = StoredRuns(
        keep=flipped_keep,
        confidence=runs.confidence,
        loss=runs.loss,
        init_mask=runs.init_mask,
        meta=runs.meta,
        dcr=runs.dcr,
        recon=runs.recon,
        whitebox=runs.whitebox,
    )
    np.testing.assert_array_equal(
        attack_scores(runs, name, TARGETS, variance="fixed"), attack_scores(flipped, name, TARGETS, variance="fixed")
    )


@pytest.mark.parametrize("name", [a.name for a in REGISTRY if a.needs is not None])
def test_an_attack_whose_needs_the_runs_lack_is_left_out_or_refused_by_name(name):
    runs = stored_runs(release=False, recon=(), whitebox=False)
    assert name not in runs.available(attack_names())
    need = {RELEASE: "released synthetic set", WHITEBOX: "white-box canary observations"}.get(
        get_attack(name).needs, "reconstruction losses"
    )
    with pytest.raises(ValueError, match=f"^{name} needs the .*{need}"):
        attack_scores(runs, name, TARGETS, variance="fixed")


def test_an_unknown_attack_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown attack 'lira_twice' \\(known: loss, lira_online"):
        get_attack("lira_twice")
