from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler_app.errors import DomainError
from scheduler_app.models import Tenant
from scheduler_app.services.tenant_network import (
    tenant_webhook_hosts_set,
    webhook_host_normalize,
)


class Command(BaseCommand):
    help = (
        "Show or change the internal hosts one tenant's http tasks, notification webhooks and "
        "channel tests may reach (the per-tenant webhook allow-list): "
        "tenant_webhook_hosts SLUG [--allow HOST ...] [--remove HOST ...] [--clear]"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--allow", nargs="+", default=[], metavar="HOST")
        parser.add_argument("--remove", nargs="+", default=[], metavar="HOST")
        parser.add_argument("--clear", action="store_true", help="allow no internal host")

    def handle(self, *args: object, **options: object) -> None:
        tenant = Tenant.objects.filter(slug=str(options["slug"])).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['slug']!r}")
        allow, remove = list(options["allow"]), list(options["remove"])
        if allow or remove or options["clear"]:
            hosts = [] if options["clear"] else list(tenant.webhook_allowed_hosts)
            try:
                removed = {webhook_host_normalize(host) for host in remove}
                hosts = [h for h in hosts if h not in removed] + allow
                tenant = tenant_webhook_hosts_set(
                    tenant=tenant, hosts=hosts, actor="operator:manage.py"
                )
            except DomainError as error:
                raise CommandError(error.message) from error
        listed = ", ".join(tenant.webhook_allowed_hosts) or "(none)"
        self.stdout.write(f"{tenant.slug}: internal hosts allowed: {listed}")
