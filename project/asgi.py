"""The web tier's application (gunicorn with uvicorn workers: project/gunicorn_conf.py)."""

import os
import warnings

from django.core.asgi import get_asgi_application

# Static files (WhiteNoise) are file responses with synchronous iterators; Django reads
# them in a thread under ASGI and warns each time. The live-log streams are async.
warnings.filterwarnings(
    "ignore",
    message="StreamingHttpResponse must consume synchronous iterators",
    module="django.core.handlers.asgi",
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
# Under ASGI each request runs its synchronous code on a thread of its own: a connection
# kept open after the request would outlive its thread. Closed at the end of each request.
os.environ.setdefault("DATABASE_CONN_MAX_AGE", "0")
application = get_asgi_application()

from project.startup import refuse_to_start_on_check_errors  # noqa: E402  (needs Django set up)

refuse_to_start_on_check_errors("web (ASGI)")
