"""The public names of the one-run ε bounds, where users import them; the code, with the theorems
it rests on, is `audit.stats.epsilon`, `audit.stats.fdp` and `audit.stats.guesses`."""

from audit.stats.epsilon import epsilon_ceiling, epsilon_lower_bound, one_run_audit
from audit.stats.guesses import fdp_epsilon_lower_bound

__all__ = ["epsilon_ceiling", "epsilon_lower_bound", "fdp_epsilon_lower_bound", "one_run_audit"]
