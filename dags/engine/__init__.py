"""The DAG engine, in the order its modules import one another (bottom first): state,
dispatch, readiness, completion, mapping, settle. `settle` is its entry from a run's end."""
