import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
application = get_wsgi_application()

from project.startup import refuse_to_start_on_check_errors  # noqa: E402  (needs Django set up)

refuse_to_start_on_check_errors("web (WSGI)")
