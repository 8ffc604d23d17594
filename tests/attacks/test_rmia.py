import numpy as np
import pytest
from scipy.special import expit, logit
from sklearn.metrics import roc_auc_score

from attacks.rmia import fit_offline_a, rmia_offline, rmia_online
from shadow_runs.plan import membership_matrix, shadow_mask

# Hand example: 3 runs (run 0 the target, runs 1 and 2 its references), 3 examples, 1 view.
#             x0    x1    x2
# p run 0:    0.9   0.3   0.6     (target; its coins must not matter)
# p run 1:    0.6   0.2   0.8     keep run 1:  IN  OUT IN
# p run 2:    0.4   0.4   0.6     keep run 2:  OUT OUT IN
HAND_P = np.array([[0.9, 0.3, 0.6], [0.6, 0.2, 0.8], [0.4, 0.4, 0.6]])
HAND_KEEP = np.array([[True, False, True], [True, False, True], [False, False, True]])


def hand_inputs():
    return logit(HAND_P)[..., None], HAND_KEEP.copy(), shadow_mask(3, [0])


def test_online_by_hand():
    stats, keep, shadows = hand_inputs()
    # Pr = mean over runs 1, 2 = (0.5, 0.3, 0.7); r = p_target / Pr = (1.8, 1.0, 6/7).
    # gamma = 1: x0 beats 1.0 and 6/7 -> 2/3; x1 beats 6/7 -> 1/3; x2 beats nothing -> 0.
    np.testing.assert_allclose(rmia_online(stats, keep, [0], shadows=shadows), [[2 / 3, 1 / 3, 0]], atol=1e-15)
    # gamma = 2: 2r = (3.6, 2.0, 12/7 = 1.714); x0: 1.8 > 1.714 only -> 1/3; x1: 1.0 > none; x2: none.
    np.testing.assert_allclose(rmia_online(stats, keep, [0], shadows=shadows, gamma=2.0), [[1 / 3, 0, 0]], atol=1e-15)


def test_offline_by_hand():
    stats, keep, shadows = hand_inputs()
    # IN observations of the references: 0.6, 0.8 (run 1), 0.6 (run 2): mean 2/3.
    # OUT observations: 0.2 (run 1), 0.4, 0.4 (run 2): mean 1/3.  a = (1 - 2/3) / (1 - 1/3) = 1/2.
    np.testing.assert_allclose(fit_offline_a(stats, keep, shadows), [0.5], atol=1e-15)
    # P_out: x0 = 0.4 (run 2), x1 = (0.2 + 0.4) / 2 = 0.3, x2 has no OUT shadow: mean(0.4, 0.3) = 0.35.
    # a = 1/2: Pr = (1.5 P_out + 0.5) / 2 = (0.55, 0.475, 0.5125);
    # r = (0.9 / 0.55, 0.3 / 0.475, 0.6 / 0.5125) = (1.636, 0.632, 1.171).
    # gamma = 1: x0 beats both -> 2/3; x1 none -> 0; x2 beats x1 -> 1/3.
    expected = [[2 / 3, 0, 1 / 3]]
    np.testing.assert_allclose(rmia_offline(stats, keep, [0], shadows=shadows, a=0.5), expected, atol=1e-15)
    np.testing.assert_allclose(rmia_offline(stats, keep, [0], shadows=shadows), expected, atol=1e-15)  # fitted a = 1/2
    # gamma = 2: 2r = (3.27, 1.263, 2.341); x0: 1.636 > 1.263 -> 1/3; x1, x2: none.
    np.testing.assert_allclose(
        rmia_offline(stats, keep, [0], shadows=shadows, a=0.5, gamma=2.0), [[1 / 3, 0, 0]], atol=1e-15
    )
    # a = 1: Pr = P_out = (0.4, 0.3, 0.35); r = (2.25, 1.0, 1.714): x0 2/3, x1 0, x2 1/3.
    np.testing.assert_allclose(rmia_offline(stats, keep, [0], shadows=shadows, a=1.0), expected, atol=1e-15)


def naive_rmia(stats, keep, targets, shadows, *, gamma, offline, a=None):
    """Reference: explicit loops over targets x views x examples x population."""
    p = expit(stats)
    n_runs, n, q = stats.shape
    out = np.zeros((len(targets), n))
    for row, t in enumerate(targets):
        refs = [r for r in range(n_runs) if shadows[row, r]]
        for v in range(q):
            pr = np.zeros(n)
            if offline:
                p_out = [None] * n
                for x in range(n):
                    outs = [p[r, x, v] for r in refs if not keep[r, x]]
                    p_out[x] = sum(outs) / len(outs) if outs else None
                known = [value for value in p_out if value is not None]
                for x in range(n):
                    po = p_out[x] if p_out[x] is not None else sum(known) / len(known)
                    pr[x] = ((1 + a[row]) * po + (1 - a[row])) / 2
            else:
                for x in range(n):
                    pr[x] = sum(p[r, x, v] for r in refs) / len(refs)
            ratio = [p[t, x, v] / pr[x] for x in range(n)]
            for x in range(n):
                out[row, x] += sum(1 for z in range(n) if ratio[x] > gamma * ratio[z]) / n / q
    return out


def naive_a(stats, keep, shadows):
    p = expit(stats)
    result = []
    for row in range(len(shadows)):
        ins, outs = [], []
        for r in np.flatnonzero(shadows[row]):
            for x in range(stats.shape[1]):
                (ins if keep[r, x] else outs).extend(p[r, x])
        result.append(min(max((1 - np.mean(ins)) / (1 - np.mean(outs)), 0.0), 1.0))
    return np.array(result)


def random_inputs(seed=0, *, n_runs=6, n=30, q=2):
    rng = np.random.default_rng(seed)
    keep = rng.random((n_runs, n)) < 0.5
    stats = rng.normal(0, 2, size=(1, n, 1)) + keep[..., None] + rng.normal(size=(n_runs, n, q))
    return stats, keep


@pytest.mark.parametrize("gamma", [1.0, 1.3])
def test_matches_the_naive_loops(gamma):
    stats, keep = random_inputs()
    targets = [0, 3]
    shadows = shadow_mask(len(stats), targets)
    online = rmia_online(stats, keep, targets, shadows=shadows, gamma=gamma)
    np.testing.assert_allclose(
        online, naive_rmia(stats, keep, targets, shadows, gamma=gamma, offline=False), rtol=0, atol=1e-12
    )
    a = fit_offline_a(stats, keep, shadows)
    np.testing.assert_allclose(a, naive_a(stats, keep, shadows), rtol=0, atol=1e-12)
    offline = rmia_offline(stats, keep, targets, shadows=shadows, gamma=gamma)
    np.testing.assert_allclose(
        offline, naive_rmia(stats, keep, targets, shadows, gamma=gamma, offline=True, a=a), rtol=0, atol=1e-12
    )


def test_offline_fills_examples_without_out_shadows_like_the_naive_loops():
    stats, keep = random_inputs(1, n_runs=3)
    targets = [0]
    shadows = shadow_mask(3, targets)
    assert (keep[1:].all(0)).any()  # some example is IN in both references
    offline = rmia_offline(stats, keep, targets, shadows=shadows, a=0.7)
    np.testing.assert_allclose(
        offline, naive_rmia(stats, keep, targets, shadows, gamma=1.0, offline=True, a=[0.7]), rtol=0, atol=1e-12
    )


def test_the_target_coins_do_not_enter_the_scores():
    stats, keep = random_inputs(2)
    targets = [0, 3]
    shadows = shadow_mask(len(stats), targets)
    flipped = keep.copy()
    flipped[targets] = ~flipped[targets]
    for attack in (rmia_online, rmia_offline):
        np.testing.assert_array_equal(
            attack(stats, keep, targets, shadows=shadows), attack(stats, flipped, targets, shadows=shadows)
        )


def test_rmia_finds_members_with_higher_confidence():
    rng = np.random.default_rng(3)
    n_runs, n = 16, 300
    keep = membership_matrix(np.arange(n) % 2, n_runs=n_runs, master_seed=0)
    stats = rng.normal(0, 2, size=(1, n, 1)) + 1.0 * keep[..., None] + rng.normal(size=(n_runs, n, 2))
    targets = np.arange(4)
    shadows = shadow_mask(n_runs, targets)
    member = keep[targets].ravel()
    raw = roc_auc_score(member, stats[targets].mean(-1).ravel())  # 0.63: the per-example base hides the shift
    for attack in (rmia_online, rmia_offline):  # AUC 0.79 and 0.75
        scores = attack(stats, keep, targets, shadows=shadows)
        assert ((scores >= 0) & (scores <= 1)).all()
        assert roc_auc_score(member, scores.ravel()) > max(0.6, raw + 0.05)


def test_bad_input_is_refused():
    stats, keep, shadows = hand_inputs()
    no_shadow = np.zeros((1, 3), dtype=bool)
    for attack in (rmia_online, rmia_offline):
        with pytest.raises(ValueError, match="shadow for every target"):
            attack(stats, keep, [0], shadows=no_shadow)
        with pytest.raises(ValueError, match="must not be a shadow"):
            attack(stats, keep, [0], shadows=np.array([[True, True, True]]))
        with pytest.raises(ValueError, match="gamma"):
            attack(stats, keep, [0], shadows=shadows, gamma=0.5)
    all_out = keep.copy()
    all_out[1:] = False  # the references hold no IN observation: a cannot be fitted
    with pytest.raises(ValueError, match="no IN observation"):
        rmia_offline(stats, all_out, [0], shadows=shadows)
    with pytest.raises(ValueError, match="no IN observation"):
        fit_offline_a(stats, all_out, shadows)
    rmia_offline(stats, all_out, [0], shadows=shadows, a=0.5)  # a given: no fit needed
    with pytest.raises(ValueError, match=r"a must lie in \[0, 1\]"):
        rmia_offline(stats, keep, [0], shadows=shadows, a=1.5)
