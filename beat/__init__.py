"""The leader-elected beat scheduler (`-S beat:LeaderScheduler`)."""

from beat.scheduler import LeaderScheduler

__all__ = ["LeaderScheduler"]
