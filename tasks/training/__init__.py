"""The one training loop, its resumable state, and the run folders it and sweeps write (apart from
the task interface, which lives in tasks/)."""
