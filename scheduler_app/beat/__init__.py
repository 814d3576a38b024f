"""The leader-elected beat scheduler (`-S scheduler_app.beat:LeaderScheduler`)."""

from scheduler_app.beat.scheduler import LeaderScheduler

__all__ = ["LeaderScheduler"]
