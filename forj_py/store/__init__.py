"""What the worker keeps across calls and restarts: the journal and the backups."""
