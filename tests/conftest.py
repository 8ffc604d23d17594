import pytest

from shadow_runs.plan import membership_matrix
from victims import load_pool

#: a configuration that trains in well under a second per run, for end-to-end CLI tests
TINY = ["--train-steps", "10", "--train-net-width", "8", "--executor", "inline", "--quiet"]


@pytest.fixture
def tiny_flags():
    return list(TINY)


@pytest.fixture(scope="module")
def pool():
    """The embedded digits pool."""
    return load_pool("digits")


@pytest.fixture(scope="module")
def keep(pool):
    """The members of run 0 of a two-run plan."""
    return membership_matrix(pool.y, n_runs=2, master_seed=0)[0]
