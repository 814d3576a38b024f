"""The fleet as the core sees it: what each worker advertises in Redis (its record), the
registry of live and dead workers, and what the live ones can run."""
