"""The schedulers' wing: what SLURM and Ray say and do, apart from the sweep that uses them.

- ``slurm.py``: the cluster's partitions and nodes, and a request fitted to them before submitting;
- ``slurm_submit.py``: a launch's jobs submitted through submitit, what each task of a job of several runs runs,
  and the jobs read back;
- ``slurm_tasks.py``: submitted tasks followed with squeue and sacct, a lost node named, an earlier launch's live
  jobs adopted;
- ``sibling_tasks.py``: the tasks of one SLURM job of several runs, as they see each other;
- ``ray_cluster.py``: a request fitted to the alive nodes and a launch's tasks followed, a dead node named;
- ``ray_jobs.py``: what a Ray task runs in its worker; ``ray_internals.py``: Ray's private address lookup, the
  one use of it;
- ``jobs.py``: the ``Jobs`` protocol the sweep's follower reads (every scheduler's jobs, in the same words);
- ``config.py``: the launchers' settings, the schemas Hydra reads.

Nothing here imports the rest of the package but ``plumbing/``, the floor below (a run's GPU, SLURM's variable
names); the Hydra plugins are thin adapters over it (``hydra_plugins/modula_sweep/``).
"""
