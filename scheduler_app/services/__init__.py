"""All writes and state transitions live here, one module per concern."""
