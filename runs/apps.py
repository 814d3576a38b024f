from django.apps import AppConfig


class RunsConfig(AppConfig):
    """Ending runs across the apps (no models of its own); adds the beat's lease and
    capability chores, and the checkpoints' expiry, to the housekeeping registry."""

    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        # Local: the app registry is ready.
        from runs import dead_workers, lost  # noqa: PLC0415
        from scheduler_app.housekeeping import Chore, chore_register  # noqa: PLC0415
        from scheduler_app.services.checkpoints import checkpoints_expire_chore  # noqa: PLC0415

        lost.chores_register()
        dead_workers.chores_register()
        # A run's checkpoint outlives its run for CHECKPOINT_RETENTION_SECONDS.
        chore_register(Chore("expired-checkpoints", checkpoints_expire_chore))
