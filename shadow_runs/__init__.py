"""Plan who is IN each run, run victims as Ray tasks, keep the results on disk."""

from shadow_runs.executor import ExecutorConfig, RunTask, execute
from shadow_runs.plan import membership_matrix, run_seed
from shadow_runs.store import RunStore, StoreError, experiment_id

__all__ = ["ExecutorConfig", "RunStore", "RunTask", "StoreError", "execute", "experiment_id", "membership_matrix", "run_seed"]
