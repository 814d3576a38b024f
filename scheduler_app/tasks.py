"""Celery discovers `scheduler_app.tasks`; the notification tasks live with alerting."""

from scheduler_app.alerting.tasks import deliver_notification, run_notifications

__all__ = ["deliver_notification", "run_notifications"]
