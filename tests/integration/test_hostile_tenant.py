"""A hostile tenant's shell tasks, run by the real worker: every attempt to reach the
platform fails safe, and each test asserts what the attacker actually saw.

The shared worker holds SECRET_KEY and DATABASE_URL in its environment, listens next to
Redis and PostgreSQL on this host's loopback, and runs from the project's checkout.
"""

from __future__ import annotations

import os
import socket
import uuid
from urllib.parse import urlparse

import pytest
from django.conf import settings

from scheduler_app.models import TaskDefinition, TaskExecution, Tenant
from scheduler_app.selectors import execution_log_get
from scheduler_app.services.task_definitions import task_trigger
from tests.egress_net import (
    BANNER,
    host_addresses,
    listener_on_every_address,
    public_looking_server,
)
from tests.factories import make_task
from tests.integration.conftest import dump_logs
from tests.processes import ROOT, database_url, host_pids_running, unique_sleep_seconds, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FINISHED = ("success", "failed", "timed_out", "cancelled")


def _run(tenant: Tenant, worker, script: str, **task: object) -> tuple[TaskExecution, str]:
    """Run `sh -c script` as a task of `tenant` on the real worker; its execution and log."""
    handler = {"type": "shell", "command": ["sh", "-c", script]}
    handler.update(task.pop("handler_extra", {}))  # type: ignore[arg-type]
    created = make_task(
        tenant,
        name=f"attack-{uuid.uuid4().hex[:8]}",
        schedule={"type": "manual"},
        handler=handler,
        retry_policy={"max_attempts": 1},
        **task,
    )
    execution = task_trigger(task=created)
    try:
        wait_until(
            lambda: TaskExecution.platform.get(id=execution.id).status in FINISHED,
            timeout=60,
            message="the attack to finish",
        )
    except AssertionError:
        print(dump_logs(worker))
        raise
    execution = TaskExecution.platform.get(id=execution.id)
    log = execution_log_get(tenant=tenant, execution=execution)
    return execution, log.text if log else ""


def _output(log: str) -> str:
    """What the attacker's commands printed (the log's system lines echo the script)."""
    return "\n".join(
        line.split("] ", 1)[1]
        for line in log.splitlines()
        if "[stdout] " in line or "[stderr] " in line
    )


def _platform_secrets() -> list[str]:
    return [settings.SECRET_KEY, database_url(), settings.REDIS_URL]


@pytest.mark.needs_os_tool("bubblewrap")
def test_the_worker_environment_and_command_lines_are_out_of_reach(tenant, live_worker):
    script = (
        "ls -d /proc/[0-9]* | wc -l; "
        "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline /proc/[0-9]*/task/*/environ; do "
        '  echo "== $f"; tr "\\0" " " < "$f"; echo; '
        "done; "
        'tr "\\0" " " < /proc/$PPID/environ; '
        "cat /proc/1/environ; echo done"
    )
    execution, log = _run(tenant, live_worker, script)
    assert execution.status == "success", log
    for secret in _platform_secrets():
        assert secret not in log  # nowhere, not even masked
    assert "celery" not in _output(log).lower()  # not even the worker's command line
    # What the attacker saw: a handful of its own processes (bwrap's init, sh, ls/tr).
    visible = int(next(line for line in log.splitlines() if "[stdout]" in line).split()[-1])
    assert visible <= 4
    assert "done" in _output(log)


@pytest.mark.needs_os_tool("bubblewrap")
def test_redis_and_postgresql_cannot_be_reached(tenant, live_worker):
    probe = (
        "import socket\n"
        "for family, host in ((socket.AF_INET, '127.0.0.1'), (socket.AF_INET6, '::1')):\n"
        "    for port in (6379, 5432):\n"
        "        try:\n"
        "            s = socket.socket(family); s.settimeout(3); s.connect((host, port))\n"
        "            print('CONNECTED', host, port)\n"
        "        except OSError as error:\n"
        "            print('failed', host, port, error.errno)\n"
    )
    execution, log = _run(tenant, live_worker, f'python3 -c "{probe}"')
    assert execution.status == "success", log
    assert "CONNECTED" not in _output(log)
    assert _output(log).count("failed") == 4


# What the attacker's egress-enabled task runs: a TCP connect to each (host, port), printing
# what it saw (the errno's name, or what the other side sent).
EGRESS_PROBE = (
    "import errno, socket, sys\n"
    "for target in sys.argv[1:]:\n"
    "    host, port = target.rsplit(':', 1)\n"
    "    s = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET)\n"
    "    s.settimeout(5)\n"
    "    try:\n"
    "        s.connect((host, int(port)))\n"
    "        print('SAW', target, 'CONNECTED', repr(s.recv(100)))\n"
    "    except socket.timeout:\n"
    "        print('SAW', target, 'TIMEOUT')\n"
    "    except OSError as error:\n"
    "        print('SAW', target, errno.errorcode.get(error.errno, error.errno))\n"
)
REFUSED_OR_UNREACHABLE = {"ECONNREFUSED", "EHOSTUNREACH", "ENETUNREACH"}


def _egress_attack(tenant: Tenant, worker, targets: list[str]) -> dict[str, str]:
    """Run the probe as an egress-enabled shell task of `tenant`; {target: what it saw}."""
    Tenant.objects.filter(id=tenant.id).update(shell_egress_allowed=True)
    tenant.refresh_from_db()
    command = ["python3", "-c", EGRESS_PROBE, *targets]
    execution, log = _run(
        tenant, worker, "", handler_extra={"network": "egress", "command": command}
    )
    assert execution.status == "success", log
    seen = {}
    for line in _output(log).splitlines():
        if line.startswith("SAW "):
            _saw, target, outcome = line.split(" ", 2)
            seen[target] = outcome
    assert set(seen) == set(targets), log
    return seen


@pytest.mark.needs_os_tool("bubblewrap", "slirp4netns")
def test_egress_reaches_the_internet_but_not_the_platform_the_host_or_private_networks(
    tenant, live_worker
):
    """The attacker may use egress (its tenant is allowed it) and tries everything a worker
    can reach: the platform's Redis and PostgreSQL on 127.0.0.1 and on every other address
    of this host, a port open on all of the host's addresses, the private ranges, the cloud
    metadata address, IPv6 loopback and ULA. It sees each refused or unreachable; a server at
    a public-looking address answers it."""
    redis_port = urlparse(settings.REDIS_URL).port or 6379
    postgres_port = int(settings.DATABASES["default"].get("PORT") or 5432)
    with listener_on_every_address() as open_port, public_looking_server() as public:
        host = host_addresses()
        for address in host:  # the host itself reaches its open port on each address
            with socket.create_connection((address, open_port), timeout=5) as check:
                assert check.recv(100) == BANNER
        platform = [
            f"{address}:{port}"
            for address in ("127.0.0.1", "::1", "10.0.2.2", *host)
            for port in (redis_port, postgres_port)
        ]
        forbidden = [
            *platform,
            *(f"{address}:{open_port}" for address in host),
            "10.1.2.3:80",
            "10.0.2.5:80",
            "172.16.0.1:80",
            "192.168.1.1:80",
            "169.254.169.254:80",
            "100.100.100.200:80",
            "fd00::1:80",
            f"::ffff:127.0.0.1:{redis_port}",
        ]
        allowed = [f"{public[0]}:{public[1]}"] if public else []
        seen = _egress_attack(tenant, live_worker, forbidden + allowed)
    print("\n".join(f"egress attacker: {target} -> {seen[target]}" for target in seen))
    for target in forbidden:
        assert seen[target] in REFUSED_OR_UNREACHABLE, (target, seen[target])
    # Nothing but the task's own (empty) loopback even answered with a refusal: the rest
    # never left the sandbox.
    for target in forbidden:
        if not target.startswith(("127.0.0.1:", "::1:", "::ffff:127.0.0.1:")):
            assert seen[target] in ("EHOSTUNREACH", "ENETUNREACH"), (target, seen[target])
    if public is None:
        pytest.skip("no network namespace for a public-looking server here (needs root)")
    assert seen[allowed[0]] == f"CONNECTED {BANNER!r}"


def test_egress_is_refused_for_a_tenant_not_allowed_it(tenant, api):
    response = api.post(
        "/api/v1/tasks",
        {
            "name": "wants-out",
            "schedule": {"type": "manual"},
            "handler": {"type": "shell", "command": ["true"], "network": "egress"},
        },
        format="json",
    )
    assert response.status_code == 400, response.content
    assert "handler.network" in response.content.decode()


@pytest.mark.needs_os_tool("bubblewrap")
def test_the_checkout_and_its_files_are_not_visible(tenant, live_worker):
    targets = [str(ROOT), f"{ROOT}/project/settings/base.py", f"{ROOT}/.env", f"{ROOT}/var"]
    script = "; ".join(f"cat {t} 2>&1 || ls {t} 2>&1" for t in targets)
    script += "; ls / ; ls /run /var /home /root /sys 2>&1; echo end"
    _, log = _run(tenant, live_worker, script)
    output = _output(log)
    assert "SECRET_KEY" not in output and "DATABASES" not in output
    assert output.count("No such file or directory") >= 2 * len(targets)
    stdout = [line.split("[stdout] ", 1)[1] for line in log.splitlines() if "[stdout] " in line]
    top_level = set(stdout[stdout.index("bin") : stdout.index("usr") + 1])
    assert top_level <= {
        "bin",
        "dev",
        "etc",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "proc",
        "sbin",
        "task",
        "tmp",
        "usr",
    }


@pytest.mark.needs_os_tool("bubblewrap")
def test_writes_outside_the_work_directory_fail(tenant, live_worker, tmp_path):
    name = f"pwned-{uuid.uuid4().hex[:8]}"
    host_targets = [f"/usr/{name}", f"/etc/{name}", f"/{name}", str(tmp_path / name)]
    script = "; ".join(f"touch {t} && echo WROTE {t}" for t in host_targets)
    script += f"; touch /task/{name} /tmp/{name} && echo scratch-ok"
    _, log = _run(tenant, live_worker, script)
    assert "WROTE" not in _output(log)
    assert "scratch-ok" in _output(log)
    assert not [t for t in host_targets if os.path.exists(t)]


@pytest.mark.needs_os_tool("bubblewrap")
def test_a_fork_bomb_is_contained_and_the_worker_carries_on(tenant, live_worker):
    marker = uuid.uuid4().hex
    bomb = f"bomb() {{ bomb | bomb & }}; bomb; sleep 30 # {marker}"
    execution, log = _run(
        tenant,
        live_worker,
        bomb,
        timeout_seconds=5,
        handler_extra={"resource_requirements": {"processes": 64}},
    )
    assert execution.status in ("timed_out", "failed", "success")

    def bomb_processes() -> list[int]:
        found = []
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    argv = fh.read().split(b"\0")
            except OSError:
                continue
            if argv[0] == b"sh" and marker.encode() in b" ".join(argv):
                found.append(int(entry))
        return found

    wait_until(lambda: not bomb_processes(), timeout=15, message="the bomb to be gone")
    after, log = _run(tenant, live_worker, "echo still-working")
    assert after.status == "success" and "still-working" in log


@pytest.mark.needs_os_tool("bubblewrap")
def test_a_daemon_does_not_outlive_its_run(tenant, live_worker):
    marker = unique_sleep_seconds()
    script = f"setsid nohup sleep {marker} >/dev/null 2>&1 & sleep 0.5; echo detached"
    execution, log = _run(tenant, live_worker, script)
    assert execution.status == "success" and "detached" in log
    wait_until(lambda: not host_pids_running(marker), timeout=10, message="the daemon to die")


def test_a_celery_task_naming_an_internal_task_is_refused(tenant, api):
    for handler, field in (
        ({"type": "celery", "task": "workers.tasks.run_execution", "args": ["x"]}, "handler.task"),
        ({"type": "celery", "task": "reports.nightly", "queue": "critical"}, "handler.queue"),
        # A tier's capability queues (egress, container) are the platform workers' as much as
        # the tier queues are.
        ({"type": "celery", "task": "reports.nightly", "queue": "normal.egress"}, "handler.queue"),
        ({"type": "celery", "task": "reports.nightly", "queue": "bulk.container"}, "handler.queue"),
    ):
        response = api.post(
            "/api/v1/tasks",
            {"name": "ring-the-platform", "schedule": {"type": "manual"}, "handler": handler},
            format="json",
        )
        assert response.status_code == 400, response.content
        assert field in response.content.decode()
    assert not TaskDefinition.platform.filter(tenant=tenant, name="ring-the-platform").exists()


@pytest.mark.parametrize("internal", ["workers.tasks.run_execution", "alerting.deliver"])
def test_a_celery_task_naming_an_internal_task_fails_at_run_time_too(tenant, live_worker, internal):
    """A definition written behind the API's back: the worker validates again and sends nothing
    (alerting's tasks were missing from the platform's prefixes)."""
    task = make_task(
        tenant,
        name="legacy",
        schedule={"type": "manual"},
        handler={"type": "shell", "command": ["true"]},
        retry_policy={"max_attempts": 1},
    )
    type(task).platform.filter(id=task.id).update(
        handler_type="celery",
        handler_config={"type": "celery", "task": internal, "args": []},
    )
    task.refresh_from_db()
    execution = task_trigger(task=task)
    wait_until(
        lambda: TaskExecution.platform.get(id=execution.id).status in FINISHED,
        timeout=60,
        message="the run to finish",
    )
    execution.refresh_from_db()
    assert (execution.status, execution.error_class) == ("failed", "invalid_config")
    assert "platform's own tasks" in execution.error_message


@pytest.mark.needs_os_tool("bubblewrap")
def test_readiness_says_how_the_worker_runs_shell_tasks(live_worker, settings):
    from django.test import Client

    settings.MONITORING = {**settings.MONITORING, "METRICS_BEARER_TOKEN": "probe-token"}
    # Only to the metrics credentials: anonymous callers get up or down.
    assert "shell_sandbox" not in Client().get("/readyz").json()
    sandboxes = (
        Client().get("/readyz", HTTP_AUTHORIZATION="Bearer probe-token").json()["shell_sandbox"]
    )
    ours = [state for name, state in sandboxes.items() if name.startswith("w-main-")]
    assert ours and ours[0].startswith("on (bubblewrap at ")
