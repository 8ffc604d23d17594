import pytest
import torch

from shadow_runs.plan import membership_matrix
from victims import load_pool

#: a configuration that trains in well under a second per run, for end-to-end CLI tests
TINY = ["--train-steps", "10", "--train-net-width", "8", "--executor", "inline", "--quiet"]


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """Tests train in this process on one torch thread, as every Ray worker does: with two, a run
    took 10-25 times longer whenever another process kept a core busy (OpenMP threads wait for
    each other), e.g. 80 s instead of 3 s for a DSA run beside a Ray worker."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def tiny_flags():
    return list(TINY)


@pytest.fixture(scope="module")
def pool():
    """The embedded digits pool."""
    return load_pool("digits")


@pytest.fixture(scope="module")
def table():
    """The embedded fair table (its runs' members: a `keep` fixture of the test module's own)."""
    return load_pool("fair")


@pytest.fixture(scope="module")
def keep(pool):
    """The members of run 0 of a two-run plan."""
    return membership_matrix(pool.y, n_runs=2, master_seed=0)[0]
