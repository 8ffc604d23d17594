"""The public names of the one-run ε bound, kept where users import them (`audit.epsilon`); the
code, with the theorem it rests on, is `audit.stats.epsilon`."""

from audit.stats.epsilon import epsilon_ceiling, epsilon_lower_bound, one_run_audit

__all__ = ["epsilon_ceiling", "epsilon_lower_bound", "one_run_audit"]
