"""The public names of the one-run ε bounds, kept where users import them (`audit.epsilon`); the
code, with the theorems they rest on, is `audit.stats.epsilon` (Steinke, Nasr & Jagielski),
`audit.stats.fdp` (the f-DP test of Mahloujifar, Melis & Chaudhuri) and `audit.stats.guesses`
(which canaries are guessed on: a count tuned on reference runs, or the grid)."""

from audit.stats.epsilon import epsilon_ceiling, epsilon_lower_bound, one_run_audit
from audit.stats.guesses import fdp_epsilon_lower_bound

__all__ = ["epsilon_ceiling", "epsilon_lower_bound", "fdp_epsilon_lower_bound", "one_run_audit"]
