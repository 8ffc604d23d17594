"""Plan who is IN each run and keep the results on disk; run victims as Ray tasks.

The package and its plan, store, records and files modules import no torch (auditing a stored
experiment needs none); `shadow_runs.executor`, which runs the victims, is imported on its own:
`from shadow_runs.executor import ExecutorConfig, RunTask, execute, EXECUTORS`.
"""

from shadow_runs.plan import membership_matrix, run_seed
from shadow_runs.store import RunStore, StoreError, experiment_id

__all__ = ["RunStore", "StoreError", "experiment_id", "membership_matrix", "run_seed"]
