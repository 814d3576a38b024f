# The application image: web, beat, workers, Flower and the migrate job all run it.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    DJANGO_SETTINGS_MODULE=project.settings.production \
    SCHEDULER_VAR_DIR=/app/var
WORKDIR /app
# bubblewrap sandboxes shell tasks; slirp4netns gives the ones allowed egress a user-mode
# network, and iproute2 (ip) writes the routes that keep them off private addresses inside
# it (prlimit, setpriv and nsenter come with util-linux, already in the base image).
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap slirp4netns iproute2 \
    && rm -rf /var/lib/apt/lists/*
COPY requirements.txt .
RUN pip install -r requirements.txt
COPY . .
# The hashed, compressed static files WhiteNoise serves (the dashboard, admin, API docs).
# Settings need a key to load; this one exists only in this build step.
RUN SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput
# Runs as an unprivileged user; only var/ (archives, scratch) is writable.
RUN useradd --create-home --uid 10001 scheduler \
    && mkdir -p /app/var/archive \
    && chown -R scheduler /app/var
USER scheduler
EXPOSE 8000
# ASGI: gunicorn supervising uvicorn workers (project/gunicorn_conf.py).
CMD ["gunicorn", "--config", "python:project.gunicorn_conf", "project.asgi:application"]
