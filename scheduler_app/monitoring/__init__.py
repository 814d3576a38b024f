"""Observability reads: run counters in Redis, queue/scheduler/worker state, dashboard stats."""
