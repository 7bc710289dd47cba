"""The words a run's state is said in, on disk and on screen."""

from __future__ import annotations

COMPLETED, DIVERGED, FAILED = "completed", "diverged", "failed"
INTERRUPTED = "interrupted"  # stopped by a signal after a checkpoint: a relaunch resumes it
RUNNING = "running"          # started and not ended (or its process was killed): a relaunch resumes it
PENDING = "pending"          # planned by a launch, not started
SKIPPED = "skipped"          # finished before this launch (or by another process): counted, not retrained
STATUSES = (COMPLETED, DIVERGED, FAILED, INTERRUPTED, RUNNING, PENDING)  # what a summary.json may say
FINISHED = (COMPLETED, DIVERGED)
COUNTED = (COMPLETED, SKIPPED, DIVERGED, FAILED, INTERRUPTED)  # the closing line of a launch
# what a job came to without a summary of its own
BUSY = "busy"      # another process is training the run (train(wait=False)): nothing was done here
PACKED = "packed"  # the status of a packed run as a whole: its members have their own
