"""schedctl: the scheduler's command-line client (see `schedctl --help`)."""
