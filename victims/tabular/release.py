"""What every tabular victim shares: a released table of `rows` records, the downstream classifier
trained on it, and its observations for the attacks. A `TableRelease`'s `release` returns the
records (in the pool's encoding) and what else its run records; `run` trains scikit-learn's
HistGradientBoostingClassifier on them (seeded by the run, one OpenMP thread) and observes it on
the whole pool: logits log predict_proba floored at 1e-6, one query view; utility its test
accuracy, AUROC and the mean TV distance of 1-way and 2-way marginals (`marginal_distances`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, ClassVar

import numpy as np

from victims.base import DEFAULT_INCLUSION_RATE, Observations, require_at_least
from victims.pool import Pool
from victims.tabular.schema import cell_counts

#: probability floor of the downstream model's log-probabilities (a class the release lacks gets it)
PROBABILITY_FLOOR = 1e-6


@dataclass(frozen=True)
class Released:
    """One run's release and what its run records beside it (fields of `Observations`)."""

    x: np.ndarray  # float32 [k, d]
    y: np.ndarray  # int64 [k]
    extra: dict = field(default_factory=dict)  # formal_epsilon, delta, mechanism, whitebox, init_idx, ...


@dataclass(frozen=True)
class TableRelease:
    """Base of the tabular victims: `rows` released records and the downstream classifier's size."""

    tabular: ClassVar[bool] = True

    rows: int = field(default=1000, metadata={"help": "records in the released table"})
    classifier_iterations: int = field(
        default=100, metadata={"help": "boosting rounds of the downstream classifier trained on the release"}
    )

    def __post_init__(self) -> None:
        require_at_least(self, {"rows": 1, "classifier_iterations": 1})

    def check(self, pool: Pool, *, inclusion_rate: float = DEFAULT_INCLUSION_RATE) -> None:
        if not pool.tabular:
            raise ValueError(f"--victim {self.name} releases a table; --dataset {pool.name} holds images")

    def release(self, pool: Pool, keep: np.ndarray, seed: int, *, inclusion_rate: float) -> Released:
        raise NotImplementedError

    def run(
        self,
        pool: Pool,
        keep: np.ndarray,
        seed: int,
        *,
        device: str = "cpu",
        inclusion_rate: float = DEFAULT_INCLUSION_RATE,
    ) -> Observations:
        """One run: the release of the members `keep`, the downstream classifier on it, observed
        on every pool record (`device` is unused: the classifier runs on the CPU)."""
        released = self.release(pool, np.asarray(keep, dtype=bool), seed, inclusion_rate=inclusion_rate)
        return observe_release(pool, released, seed=seed, iterations=self.classifier_iterations)


def observe_release(pool: Pool, released: Released, *, seed: int, iterations: int) -> Observations:
    """The downstream classifier trained on `released`, observed on the pool."""
    model = _fit_classifier(pool, released.x, released.y, seed=seed, iterations=iterations)
    log_p = _log_probabilities(model, pool.x, pool.n_classes)
    log_p_test = _log_probabilities(model, pool.x_test, pool.n_classes)
    one_way, two_way = marginal_distances(pool.schema, released.x, released.y, pool.x_test, pool.y_test)
    utility = {
        "test_auroc": _auroc(log_p_test, pool.y_test, pool.n_classes),
        "marginal_tv_1way": one_way,
        "marginal_tv_2way": two_way,
    }
    return Observations(
        logits=log_p[:, None, :],
        test_accuracy=float(np.mean(log_p_test.argmax(1) == pool.y_test)),
        release_x=released.x,
        release_y=released.y,
        utility=utility,
        **released.extra,
    )


def _fit_classifier(pool: Pool, x: np.ndarray, y: np.ndarray, *, seed: int, iterations: int) -> Any:
    """The fitted classifier, or the one class a release of one class holds (then it predicts that class)."""
    if len(np.unique(y)) < 2:
        return int(y[0])
    from sklearn.ensemble import HistGradientBoostingClassifier

    from threadpoolctl import threadpool_limits

    model = HistGradientBoostingClassifier(
        max_iter=iterations,
        categorical_features=pool.schema.categorical,
        early_stopping=False,
        random_state=seed % 2**32,
    )
    with threadpool_limits(1):
        return model.fit(x, y)


def _log_probabilities(model: Any, x: np.ndarray, n_classes: int) -> np.ndarray:
    """float32 [n, n_classes]: log p of every class, floored (`PROBABILITY_FLOOR`) and renormalised."""
    p = np.full((len(x), n_classes), PROBABILITY_FLOOR)
    if isinstance(model, int):
        p[:, model] = 1.0
    else:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):
            p[:, model.classes_] = np.maximum(model.predict_proba(x), PROBABILITY_FLOOR)
    return np.log(p / p.sum(1, keepdims=True)).astype(np.float32)


def _auroc(log_p: np.ndarray, y: np.ndarray, n_classes: int) -> float:
    """One-vs-rest AUROC (macro over the classes the test split holds); 0.5 for a constant model."""
    from sklearn.metrics import roc_auc_score

    present = np.unique(y)
    if len(present) < 2:
        return float("nan")
    if n_classes == 2:
        return float(roc_auc_score(y, log_p[:, 1] - log_p[:, 0]))
    scores = [roc_auc_score(y == c, log_p[:, c]) for c in present]
    return float(np.mean(scores))


def marginal_distances(schema, x: np.ndarray, y: np.ndarray, x_ref: np.ndarray, y_ref: np.ndarray) -> tuple:
    """(mean 1-way TV, mean 2-way TV) between two tables' marginals on the schema's discrete domain,
    averaged over every column, then over every pair: 0 for equal marginals, 1 for disjoint ones."""
    codes, reference = schema.codes(x, y), schema.codes(x_ref, y_ref)
    sizes = schema.domain_sizes

    def tv(columns: tuple[int, ...]) -> float:
        a, b = cell_counts(codes, sizes, columns), cell_counts(reference, sizes, columns)
        return 0.5 * float(np.abs(a / a.sum() - b / b.sum()).sum())

    one_way = [tv((c,)) for c in range(len(sizes))]
    two_way = [tv(pair) for pair in combinations(range(len(sizes)), 2)]
    return float(np.mean(one_way)), float(np.mean(two_way))
