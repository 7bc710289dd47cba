"""The schedulers' wing: what SLURM and Ray say and do, apart from the sweep that uses them. ``slurm.py``: the
cluster's partitions and nodes, and a request fitted to them before submitting; ``slurm_tasks.py``: submitted
tasks followed with squeue and sacct, a lost node named, an earlier launch's live jobs adopted; ``ray_cluster.py``:
a request fitted to the alive nodes and a launch's tasks followed, a dead node named; ``ray_internals.py``: Ray's
private address lookup, the one use of it; ``jobs.py``: the ``Jobs`` protocol the sweep's follower reads (every
scheduler's jobs, in the same words); ``config.py``: the launchers' settings, the schemas Hydra
reads. Nothing here imports the rest of the package."""
