"""The registries' contracts. Attacks: every registered attack, on stored runs that hold what it
needs, scores each target [T, n] from the target's outputs and the reference runs alone. Bounds:
every registered bound has its keys in summary.json's entries, one of them is the verdict's, and
each test gives the values it gave before the registry existed."""

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from attacks.registry import FAMILIES, HEADLINE_ATTACK, REGISTRY, RELEASE, TABLE, WHITEBOX, attack_names, get_attack
from audit.evaluate import StoredRuns, attack_scores, attack_summary
from audit.stats.bounds import (
    ANALYSES,
    BOUND_GROUP,
    BOUNDS,
    BUILT_IN,
    MECHANISM as MECHANISM_BOUND,
    SUMMARY_KEYS,
    UNITS,
    VERDICT_BOUND,
    gaussian_epsilon,
    get_bound,
)
from audit.stats.mechanism import SubsampledGaussian
from audit.stats.epsilon import Guesses
from audit.stats.guesses import bound_at, bounds_of, verdict_bound
from shadow_runs.plan import FIXED_REMAINDER, membership_matrix

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
        # a released table: a member raises its release's density and its counts (3 queries)
        release_density=signal + rng.normal(0, 0.3, (N_RUNS, N)) if release else None,
        release_counts=rng.poisson(2 + 3 * signal[..., None], (N_RUNS, N, 3)).astype(np.int32) if release else None,
        # and released records only a member could have put there, in 2 columns
        release_support=rng.poisson(2 * signal[..., None], (N_RUNS, N, 2)).astype(np.float64) if release else None,
        # and released records on pairs of columns only a member holds
        release_pair_support=rng.poisson(1 + 2 * signal, (N_RUNS, N)).astype(np.float64) if release else None,
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


def test_an_attack_row_is_built_from_named_fields_only():
    loss = get_attack("loss")
    with pytest.raises(TypeError):
        type(loss)("loss", "model", None, 1, False, loss.score, loss.about)


@pytest.mark.parametrize("families", [("model", "release"), ("model", "generator", "mechanism"), ()])
def test_a_command_s_families_are_taken_in_registry_order(families):
    names = attack_names(*families)
    in_registry = [a.name for a in REGISTRY if not families or a.family in families]
    assert list(names) == in_registry and all(get_attack(n).family in (families or FAMILIES) for n in names)


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
        release_density=runs.release_density,
        release_counts=runs.release_counts,
        release_support=runs.release_support,
        release_pair_support=runs.release_pair_support,
    )
    np.testing.assert_array_equal(
        attack_scores(runs, name, TARGETS, variance="fixed"), attack_scores(flipped, name, TARGETS, variance="fixed")
    )


@pytest.mark.parametrize("variance", ["fixed", "global", "per-example"])
@pytest.mark.parametrize("name", attack_names())
def test_under_the_fixed_remainder_the_canaries_are_scored_and_no_row_turns_nan(name, variance):
    """`--plan fixed-remainder`: the natural rows are members of every run, so none has an OUT shadow;
    the canaries (the last 8 rows) keep their coins. Every attack scores them without a warning, NaN
    only where it leaves a row unscored under independent coins too (pbb's second half); those that
    calibrate on the reference runs find the planted signal on the canaries."""
    n_canaries = 8
    keep = membership_matrix(
        np.zeros(N),
        n_runs=N_RUNS,
        master_seed=0,
        record_of_row=np.arange(N),
        plan=FIXED_REMAINDER,
        n_natural=N - n_canaries,
    )
    assert keep[:, : N - n_canaries].all() and np.array_equal(
        keep[:, -n_canaries:], stored_runs().keep[:, -n_canaries:]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no mean of an empty side, no division by zero
        scores = attack_scores(stored_runs(keep=keep), name, TARGETS, variance=variance)
    independent = attack_scores(stored_runs(), name, TARGETS, variance=variance)
    np.testing.assert_array_equal(np.isnan(scores), np.isnan(independent))
    canary, coins = scores[:, -n_canaries:], keep[TARGETS][:, -n_canaries:]
    scored = ~np.isnan(canary)
    assert np.isfinite(canary[scored]).all()
    if get_attack(name).calibrated and scored.any():
        assert canary[coins & scored].mean() > canary[~coins & scored].mean()


@pytest.mark.parametrize("name", [a.name for a in REGISTRY if a.needs is not None])
def test_an_attack_whose_needs_the_runs_lack_is_left_out_or_refused_by_name(name):
    runs = stored_runs(release=False, recon=(), whitebox=False)
    assert name not in runs.available(attack_names())
    need = {RELEASE: "released synthetic set", TABLE: "released table", WHITEBOX: "white-box canary observations"}.get(
        get_attack(name).needs, "reconstruction losses"
    )
    with pytest.raises(ValueError, match=f"^{name} needs the .*{need}"):
        attack_scores(runs, name, TARGETS, variance="fixed")


def test_an_unknown_attack_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown attack 'lira_twice' \\(did you mean 'lira_online'\\?\\)"):
        get_attack("lira_twice")
    with pytest.raises(ValueError, match=f"unknown attack 'zzz' \\(known: {', '.join(attack_names())}; or a module"):
        get_attack("zzz")


# ---------------------------------------------------------------------------
# the bound registry (audit.stats.bounds)

CONTRACTS = Path(__file__).resolve().parents[2] / "docs" / "contracts.md"


def test_bound_names_labels_and_keys_are_unique_and_the_fields_are_meaningful():
    assert ANALYSES == tuple(b.name for b in BOUNDS) and len(set(ANALYSES)) == len(BOUNDS)
    assert len({b.label for b in BOUNDS}) == len(BOUNDS)
    keys = [key for b in BOUNDS for key in b.keys]
    assert len(keys) == len(set(keys)) and SUMMARY_KEYS == ("guess_rule", *keys, "guesses")
    for bound in BOUNDS:
        assert bound.unit in UNITS and bound.about and callable(bound.test)
        assert get_bound(bound.name) is bound
    with pytest.raises(ValueError, match=f"analysis must be one of {', '.join(ANALYSES)}, got 'renyi'"):
        get_bound("renyi")


def test_a_bound_row_is_built_from_named_fields_only():
    with pytest.raises(TypeError):
        type(VERDICT_BOUND)("fdp", "eps_lower_fdp", "eps_ceiling_fdp", "f-DP", "eps", bound_at, "about")


def test_exactly_one_bound_is_the_verdict_s_an_epsilon_bound_named_in_summary_json():
    assert [b for b in BOUNDS if b.verdict] == [VERDICT_BOUND]
    assert VERDICT_BOUND.unit == "eps"  # a verdict compares it with a claimed ε
    groups = {"a": (np.arange(20.0) + 10, np.arange(20.0))}
    found = verdict_bound(
        groups, chosen=None, guesses=None, delta=0.0, confidence=0.95, rng_of=lambda _: np.random.default_rng(0)
    )
    assert found["analysis"] == VERDICT_BOUND.about


def test_every_bound_s_keys_are_in_summary_json_entries_and_documented():
    rng = np.random.default_rng(0)
    membership = rng.random((2, 60)) < 0.5
    scores = membership + rng.normal(0, 1, membership.shape)
    init = np.zeros_like(membership)
    mechanism = SubsampledGaussian(2.0, 1.0, 4)  # a claimed mechanism: its own curve's keys are set too
    bounded = attack_summary(scores, membership, init, delta=1e-5, confidence=0.95, seed=0, mechanism=mechanism)
    unclaimed = attack_summary(scores, membership, init, delta=1e-5, confidence=0.95, seed=0)
    unbounded = attack_summary(scores, membership, init, delta=1e-5, confidence=0.95, seed=0, fair_coins=False)
    # the own curve is tested under the tuned rule only (the grid would need a family search per count)
    member, nonmember = scores[membership], scores[~membership]
    tuned = bounds_of(
        member,
        nonmember,
        delta=1e-5,
        confidence=0.95,
        rng=np.random.default_rng(0),
        tuned=dict.fromkeys(ANALYSES, Guesses(10, 10)),
        mechanism=mechanism,
    )
    contracts = CONTRACTS.read_text()
    for bound in BOUNDS:
        for key in bound.keys:
            assert isinstance(tuned[key], float), key
            assert isinstance(bounded[key], float) != bound.needs_mechanism, key  # grid: no own curve
            assert key in unbounded and unbounded[key] is None, key
            assert (unclaimed[key] is None) == bound.needs_mechanism, key
            assert f"`{key}`" in contracts, f"{key} is not described in docs/contracts.md"
        assert set(tuned["guesses"][bound.name]) == {"k_in", "k_out", "correct"}
    assert set(tuned["guesses"]) == set(ANALYSES)
    assert set(unclaimed["guesses"]) == {b.name for b in BOUNDS if not b.needs_mechanism}


#: each bound's test on one design, as `bound_at` gave it before the registry (commit 550a47e)
DESIGN = {"m": 1000, "guesses": 100, "correct": 90, "alpha": 0.05}
BEFORE = {
    ("steinke", 1e-5): 1.6261434806956458,
    ("steinke", 0.0): 1.6308231927405359,
    ("fdp", 1e-5): 1.6143181101106165,
    ("fdp", 0.0): 1.6149327402590643,
    ("gaussian", 1e-5): 0.6025036074388481,
    ("gaussian", 0.0): 0.6025036074388481,
}


def test_every_built_in_bound_without_a_mechanism_has_its_values_pinned():
    assert {b.name for b in BUILT_IN if not b.needs_mechanism} == {name for name, _ in BEFORE}


@pytest.mark.parametrize("name", sorted({name for name, _ in BEFORE}))
def test_each_bound_s_test_gives_the_values_it_gave_before(name):
    bound = get_bound(name)
    for delta in (1e-5, 0.0):
        expected = pytest.approx(BEFORE[name, delta], rel=1e-12)
        assert bound.test(**DESIGN, delta=delta) == expected
        assert bound_at(name, **DESIGN, delta=delta) == expected
        # a count that cannot beat a bound already found is dismissed with 0
        assert bound.test(**DESIGN, delta=delta, at_least=5.0) == 0.0
    assert gaussian_epsilon(1.0, 1e-5) == pytest.approx(4.3771780956812245, rel=1e-12)
    assert gaussian_epsilon(1.0, 0.0) is None and gaussian_epsilon(0.0, 0.0) == 0.0


def test_the_claimed_mechanism_s_test_is_the_gaussian_family_s_epsilon_at_full_batch():
    # q = 1: the claimed mechanism is exactly μ-GDP with μ = √T / σ, so the smallest rejected σ* is
    # √T / μ* for the largest rejected μ* (0.6025 on DESIGN, above), and its ε at δ is μ*'s:
    # gaussian_epsilon(0.6025, 1e-5) = 2.384 (measured), whatever σ and T were claimed
    mu = BEFORE["gaussian", 1e-5]
    for claim in (SubsampledGaussian(3.0, 1.0, 9), SubsampledGaussian(0.5, 1.0, 1)):
        found = MECHANISM_BOUND.test(**DESIGN, delta=1e-5, mechanism=claim)
        assert found == pytest.approx(gaussian_epsilon(mu, 1e-5), rel=1e-9)
        assert bound_at("mechanism", **DESIGN, delta=1e-5, mechanism=claim) == found
        assert MECHANISM_BOUND.test(**DESIGN, delta=1e-5, mechanism=claim, at_least=found + 0.1) == 0.0
    with pytest.raises(ValueError, match="pass mechanism="):
        bound_at("mechanism", **DESIGN, delta=1e-5)
    with pytest.raises(ValueError, match="needs delta in"):
        MECHANISM_BOUND.test(**DESIGN, delta=0.0, mechanism=SubsampledGaussian(3.0, 1.0, 9))


def test_bounds_of_and_the_verdict_s_bound_give_the_values_they_gave_before():
    rng = np.random.default_rng(0)
    member, nonmember = rng.normal(1.5, 1, 400), rng.normal(0, 1, 400)
    grid = bounds_of(member, nonmember, delta=1e-5, confidence=0.95, rng=np.random.default_rng(1))
    assert list(grid) == list(SUMMARY_KEYS)
    assert grid == {
        "guess_rule": "grid",
        "eps_lower": pytest.approx(1.9947115228142138, rel=1e-12),
        "eps_ceiling": pytest.approx(4.7326258158063865, rel=1e-12),
        "eps_lower_fdp": pytest.approx(2.0404333709766593, rel=1e-12),
        "eps_ceiling_fdp": pytest.approx(4.881690481634575, rel=1e-12),
        "mu_lower": pytest.approx(0.6714181020776955, rel=1e-12),
        "mu_ceiling": pytest.approx(1.663791232861299, rel=1e-12),
        "eps_gaussian": pytest.approx(2.775580749738337, rel=1e-12),
        "eps_lower_mechanism": None,
        "eps_ceiling_mechanism": None,
        "guesses": {
            "steinke": {"k_in": 100, "k_out": 100, "correct": 189},
            "fdp": {"k_in": 50, "k_out": 0, "correct": 50},
            "gaussian": {"k_in": 100, "k_out": 100, "correct": 189},
        },
    }
    tuned = bounds_of(
        member,
        nonmember,
        delta=0.0,
        confidence=0.95,
        rng=np.random.default_rng(1),
        tuned=dict.fromkeys(ANALYSES, Guesses(50, 50)),
    )
    assert (tuned["guess_rule"], tuned["eps_lower_fdp"], tuned["eps_gaussian"]) == (
        "tuned",
        pytest.approx(2.4867672103991936, rel=1e-12),
        None,
    )
    rng = np.random.default_rng(0)
    groups = {
        "a": (rng.normal(1.5, 1, 200), rng.normal(0, 1, 200)),
        "b": (rng.normal(0.5, 1, 200), rng.normal(0, 1, 200)),
    }

    def rng_of(attack):
        return np.random.default_rng([0, ord(attack)])

    grid = verdict_bound(groups, chosen=None, guesses=None, delta=1e-5, confidence=0.95, rng_of=rng_of)
    assert (grid["rule"], grid["attack"], grid["bounds"], grid["ceilings"]) == (
        "grid",
        "a",
        {"a": pytest.approx(1.6494488917327854, rel=1e-12), "b": pytest.approx(0.4966918046015798, rel=1e-12)},
        {"a": pytest.approx(4.089898753082595, rel=1e-12), "b": pytest.approx(4.089898753082595, rel=1e-12)},
    )
    tuned = verdict_bound(groups, chosen="b", guesses=Guesses(20, 20), delta=1e-5, confidence=0.95, rng_of=rng_of)
    assert (tuned["rule"], tuned["eps_lower"], tuned["eps_ceiling"], tuned["guesses"]) == (
        "tuned",
        pytest.approx(0.5573046322933806, rel=1e-12),
        pytest.approx(4.890465178286051, rel=1e-12),
        {"k_in": 20, "k_out": 20, "correct": 31},
    )


def installed_bound_keys(tmp_path, module: str, entry: str) -> subprocess.CompletedProcess:
    """What a fresh interpreter's registry makes of the bound `entry` (`name = module:object` of
    `BOUND_GROUP`) of an installed distribution whose module is `module`."""
    (tmp_path / "my_bound.py").write_text(module)
    info = tmp_path / "my_bound-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-bound\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{BOUND_GROUP}]\n{entry}\n")
    show = "from audit.stats.bounds import ANALYSES, SUMMARY_KEYS, get_bound; print(ANALYSES, SUMMARY_KEYS)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", show], env=env, capture_output=True, text=True)


HALF_STEINKE = (
    "from audit.stats.bounds import Bound, steinke_test\n\n"
    "HALF = Bound(name='half', lower_key='eps_lower_half', ceiling_key='eps_ceiling_half', label='half',\n"
    "             unit='eps', about='half the one-run bound', test=lambda **kw: steinke_test(**kw) / 2)\n"
    "TAKEN = Bound(name='taken', lower_key='eps_lower', ceiling_key='eps_ceiling_taken', label='taken',\n"
    "              unit='eps', about='x', test=steinke_test)\n"
)


def test_an_installed_bound_follows_the_built_in_ones(tmp_path):
    done = installed_bound_keys(tmp_path, HALF_STEINKE, "half = my_bound:HALF")
    assert done.returncode == 0, done.stderr
    analyses = tuple(b.name for b in BUILT_IN) + ("half",)
    keys = ("guess_rule", *(k for b in BUILT_IN for k in b.keys), "eps_lower_half", "eps_ceiling_half", "guesses")
    assert done.stdout.strip() == f"{analyses} {keys}"


@pytest.mark.parametrize(
    "entry, named",
    [
        ("taken = my_bound:TAKEN", "bound taken does not follow the bound protocol: eps_lower taken by another bound"),
        ("other = my_bound:HALF", "its entry point names a bound called 'half'"),
        ("half = my_bound:steinke_test", "bound half does not follow the bound protocol: not a Bound"),
        ("half = my_bound:NOPE", "its entry point 'my_bound:NOPE' does not load (AttributeError"),
    ],
)
def test_an_installed_bound_that_does_not_fit_is_refused_in_one_line(tmp_path, entry, named):
    done = installed_bound_keys(tmp_path, HALF_STEINKE, entry)
    assert done.returncode != 0 and named in done.stderr.strip().splitlines()[-1], done.stderr
