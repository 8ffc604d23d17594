import pytest

#: a configuration that trains in well under a second per run, for end-to-end CLI tests
TINY = ["--train-steps", "10", "--train-net-width", "8", "--executor", "inline", "--quiet"]


@pytest.fixture
def tiny_flags():
    return list(TINY)
