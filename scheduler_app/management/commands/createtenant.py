from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler_app.errors import DomainError
from scheduler_app.services.tenants import tenant_create_with_admin


class Command(BaseCommand):
    help = "Create a tenant and its admin user: createtenant SLUG --admin USER --password PASS"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", default="")
        parser.add_argument("--admin", required=True, help="username of the tenant's admin")
        parser.add_argument("--password", required=True)
        parser.add_argument("--email", default="")
        parser.add_argument(
            "--staff", action="store_true", help="also make the user a Django admin superuser"
        )

    def handle(self, *args: object, **options: object) -> None:
        try:  # the same password validators as every other way a user gets a password
            validate_password(
                str(options["password"]), user=get_user_model()(username=str(options["admin"]))
            )
        except ValidationError as error:
            raise CommandError("password: " + " ".join(error.messages)) from error
        try:
            tenant, user = tenant_create_with_admin(
                slug=str(options["slug"]),
                name=str(options["name"]),
                username=str(options["admin"]),
                password=str(options["password"]),
                email=str(options["email"]),
                staff=bool(options["staff"]),
            )
        except DomainError as error:
            raise CommandError(error.message) from error
        self.stdout.write(f"created tenant {tenant.slug} with admin {user}")
