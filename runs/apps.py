from django.apps import AppConfig


class RunsConfig(AppConfig):
    """Ending runs across the apps (no models of its own); adds the beat's lease and
    capability chores to the housekeeping registry."""

    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        # Local: the app registry is ready.
        from runs import dead_workers, lost  # noqa: PLC0415

        lost.chores_register()
        dead_workers.chores_register()
