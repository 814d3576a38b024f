"""The benches' default stack (bench/stack_defaults.py) is the stack `make run` and compose
start: the same commands, options and environment, read from the same places. Parsed, not
timed: nothing here starts a process."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest
import yaml

from bench import stack_defaults
from devstack.commands import beat_command, worker_command

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def _make_target(name: str) -> list[str]:
    """The recipe lines of a Makefile target."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"^{name}:", line))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


def _argv(service: str) -> list[str]:
    command = SERVICES[service]["command"]
    return shlex.split(command) if isinstance(command, str) else list(command)


def _option(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def _celery(argv: list[str], kind: str) -> list[str]:
    """What follows `celery` in a command (`python -m celery` or the `celery` script)."""
    start = argv.index("celery") + 1
    rest = argv[start:]
    assert rest[:3] == ["-A", "project", kind], argv
    return rest


def _services(kind: str) -> list[str]:
    return [
        name
        for name, service in SERVICES.items()
        if "command" in service and "celery" in _argv(name) and kind in _argv(name)
    ]


def test_make_run_starts_the_stack_whose_commands_the_benches_read():
    assert any("manage.py runstack" in line for line in _make_target("run"))
    source = (ROOT / "devstack" / "localstack.py").read_text()
    started = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_start":
            name, argv = node.args[0], node.args[1]
            if isinstance(name, ast.Constant) and isinstance(argv, ast.Call):
                started[name.value] = getattr(argv.func, "id", None)
    assert started["beat"] == "beat_command"
    assert started["worker"] == "worker_command"


def test_the_default_worker_and_beat_are_make_runs():
    python = "python"
    assert stack_defaults.worker_argv((), name="local@%h") == worker_command(python)[1:]
    assert stack_defaults.beat_argv(()) == beat_command(python)[1:]


def test_the_default_worker_has_what_compose_workers_have():
    worker = _celery(stack_defaults.worker_argv((), name="n@%h"), "worker")
    compose_workers = _services("worker")
    assert compose_workers
    for service in compose_workers:
        theirs = _celery(_argv(service), "worker")
        assert _option(theirs, "-l") == _option(worker, "-l"), service
        for flag in ("--without-gossip", "--without-mingle", "--without-heartbeat", "-P"):
            assert flag not in theirs and flag not in worker, (service, flag)
        assert set(_option(theirs, "-Q").split(",")) <= set(_option(worker, "-Q").split(","))


def test_the_default_beat_uses_the_scheduler_class_compose_names():
    from django.conf import settings

    beat = _celery(stack_defaults.beat_argv(()), "beat")
    assert "-S" not in beat  # the app's default: CELERY_BEAT_SCHEDULER
    for service in _services("beat"):
        theirs = _celery(_argv(service), "beat")
        assert _option(theirs, "-S") == settings.CELERY_BEAT_SCHEDULER, service
        assert _option(theirs, "-l") == _option(beat, "-l"), service


def test_nothing_the_bench_sets_for_itself_reaches_a_default_stack():
    env = stack_defaults.stack_env(())
    assert all(env[name] is None for name in stack_defaults.BENCH_ONLY_ENV)
    for name, service in SERVICES.items():
        for variable in stack_defaults.BENCH_ONLY_ENV:
            assert variable not in (service.get("environment") or {}), (name, variable)


def test_a_departure_is_named_in_its_row_and_changes_only_what_it_says():
    (combo,) = stack_defaults.departure_rows(["--departures=log-warning"])[1:]
    assert stack_defaults.label("shell 100/s", combo) == (
        "shell 100/s, worker and beat at WARNING (departure: log level)"
    )
    worker = stack_defaults.worker_argv(combo, name="n@%h")
    default = stack_defaults.worker_argv((), name="n@%h")
    assert _option(worker, "-l") == "WARNING"
    assert [a for a in worker if a != "WARNING"] == [a for a in default if a != "INFO"]
    assert stack_defaults.stack_env(combo)["LOG_LEVEL"] == "WARNING"
    assert stack_defaults.label("shell 100/s", ()) == "shell 100/s, defaults"


def test_an_unknown_departure_is_refused_by_name():
    with pytest.raises(SystemExit, match="'no-such'"):
        stack_defaults.departure_rows(["--departures=no-such"])


def test_the_non_root_worker_is_the_images_user():
    dockerfile = (ROOT / "Dockerfile").read_text()
    user, uid = stack_defaults.image_user()
    assert f"USER {user}" in dockerfile
    assert f"--uid {uid} {user}" in dockerfile
    assert uid != 0


def test_the_former_bench_settings_are_one_named_row():
    (combo,) = stack_defaults.departure_rows(["--departures=old-bench+workers-2x4"])[1:]
    worker = stack_defaults.worker_argv(combo, name="n@%h")
    assert _option(worker, "-l") == "WARNING" and _option(worker, "-c") == "4"
    assert {"--without-gossip", "--without-mingle", "--without-heartbeat"} <= set(worker)
    assert _option(stack_defaults.beat_argv(combo), "-S") == "beat:LeaderScheduler"
    assert stack_defaults.worker_count_and_concurrency(combo) == (2, 4)
    assert stack_defaults.raises_quotas(combo)
    assert stack_defaults.stack_env(combo)["CELERY_SEND_EVENTS"] == "false"
    label = stack_defaults.label("ours 833/s", combo)
    for departure in combo:
        assert departure.name in label
