"""Ringing: how a run reaches a worker. A doorbell (the message a run is rung with) is
admitted by tenant fairness, given a sticky hint where the worker before it is alive, and
published to the broker: `ring.ring` takes every batch through those steps."""
