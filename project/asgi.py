import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
application = get_asgi_application()

from project.startup import refuse_to_start_on_check_errors  # noqa: E402  (needs Django set up)

refuse_to_start_on_check_errors("web (ASGI)")
