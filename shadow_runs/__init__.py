"""Plan who is IN each run and keep the results on disk.

The package imports no victim and no torch (auditing a stored experiment needs neither); the
runs are trained by `audit.executor` (Ray tasks, or inline), which imports the victims.
"""

from shadow_runs.plan import membership_matrix, run_seed
from shadow_runs.store import RunStore, StoreError, experiment_id

__all__ = ["RunStore", "StoreError", "experiment_id", "membership_matrix", "run_seed"]
