"""The deployments' Redis ACLs (deploy/redis/), on real servers started by the same script
compose and Kubernetes use: every process works as its own user (a worker with gossip,
mingle and heartbeats as deployed, a beat, the web tier, Flower), nothing any of them did
was refused; and each user, played as an attacker who holds it, is refused what it does not
need. A client without credentials can run nothing."""

from __future__ import annotations

import json
import sys
import time
import uuid

import pytest
import redis
import redis.exceptions
import requests
from django.test import override_settings

from dags.models import DagRun
from scheduler_app.models import TaskExecution
from tests.integration.conftest import FAST_BEAT, dump_logs
from tests.processes import _start, service_env, start_beat, start_web, wait_until
from tests.redis_acl import acl_redis
from tests.redis_servers import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(600)]

METRICS_TOKEN = "acl-test-metrics-token"
FLOWER_LOGIN = ("ops", "flower-pw")
CHATTY = "for i in 1 2 3; do echo line-$i; sleep 0.5; done"


def _env(queue, live, user: str) -> dict[str, str]:
    """A process of the deployment connecting as `user` (on both Redis servers)."""
    return {
        "REDIS_URL": queue.url(),
        "LIVE_LOGS_REDIS_URL": live.url(),
        "REDIS_USERNAME": user,
        "REDIS_PASSWORD": queue.passwords[user],
        # The prefixes the shipped ACLs are written for (the deployments' defaults).
        "SCHEDULER_REDIS_PREFIX": "sched:",
        "BROKER_KEY_PREFIX": "",
        "METRICS_BEARER_TOKEN": METRICS_TOKEN,
    }


def _worker(env: dict[str, str]):
    """A worker as compose and Kubernetes run it: no --without-gossip/mingle/heartbeat."""
    argv = [sys.executable, "-m", "celery", "-A", "project", "worker", "-Q"]
    argv += [
        "critical,normal,bulk",
        "-c",
        "2",
        "-n",
        f"acl-{uuid.uuid4().hex[:6]}@%h",
        "-l",
        "INFO",
    ]
    worker = _start("worker-acl", argv, service_env(**env))
    worker.wait_for_log("ready.", timeout=90)
    return worker


def _flower(env: dict[str, str]):
    port = free_port()
    argv = [sys.executable, "-m", "celery", "-A", "project", "flower", f"--port={port}"]
    argv += ["--address=127.0.0.1", f"--basic_auth={':'.join(FLOWER_LOGIN)}"]
    flower = _start("flower-acl", argv, service_env(**env))
    flower.extra["url"] = f"http://127.0.0.1:{port}"
    wait_until(
        lambda: _get(f"{flower.extra['url']}/healthcheck") is not None or not flower.alive(),
        timeout=60,
        message="flower to answer",
    )
    return flower


def _get(url: str, **options):
    try:
        return requests.get(url, timeout=10, **options)
    except requests.RequestException:
        return None


def _sse_lines(url: str, headers: dict[str, str]) -> list[str]:
    """The data of every event of a log stream, until its end."""
    seen = []
    with requests.get(
        url, headers={**headers, "Accept": "text/event-stream"}, stream=True, timeout=60
    ) as response:
        assert response.status_code == 200, response.text
        event, deadline = None, time.monotonic() + 60
        for raw in response.iter_lines(decode_unicode=True):
            if time.monotonic() > deadline:
                raise AssertionError(f"the stream did not end within 60 s: {seen}")
            if raw.startswith("event: "):
                event = raw.removeprefix("event: ")
            elif raw.startswith("data: "):
                seen.append(f"{event or 'line'}: {raw.removeprefix('data: ')}")
                if event == "end":
                    return seen
            elif raw == "":
                event = None
    return seen


def test_every_process_works_as_its_own_redis_user_and_each_user_only_as_far_as_it_must(
    tenant_and_user,
):
    _tenant, user = tenant_and_user
    # The web process runs the runtime settings, whose hashers do not read the test
    # settings' fast MD5 hashes.
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.PBKDF2PasswordHasher"]):
        user.set_password("pw-123456")
        user.save(update_fields=["password"])
    with acl_redis("queue.acl") as queue:
        # One password per user on both servers, as the deployments give them.
        shared = {name: queue.passwords[name] for name in ("worker", "web")}
        with acl_redis("live-logs.acl", passwords=shared) as live:
            _run_the_stack_and_attack(user, queue, live)


def _run_the_stack_and_attack(user, queue, live) -> None:
    processes = []
    try:
        worker = _worker(_env(queue, live, "worker"))
        processes.append(worker)
        web = start_web(env_overrides=_env(queue, live, "web"))
        processes.append(web)
        beat = start_beat(node_id="acl", env_overrides={**FAST_BEAT, **_env(queue, live, "beat")})
        processes.append(beat)
        flower = _flower(_env(queue, live, "flower"))
        processes.append(flower)
        base = web.extra["url"]
        login = requests.post(
            f"{base}/api/v1/auth/token",
            json={"username": user.username, "password": "pw-123456"},
            timeout=10,
        )
        assert login.status_code == 200, login.text
        token = login.json()["access"]
        auth = {"Authorization": f"Bearer {token}"}

        # A run followed live through the web tier (SSE from the live-log Redis).
        chatty = requests.post(
            f"{base}/api/v1/tasks",
            json={
                "name": "chatty",
                "schedule": {"type": "manual"},
                "handler": {"type": "shell", "command": ["sh", "-c", CHATTY]},
            },
            headers=auth,
            timeout=10,
        )
        assert chatty.status_code == 201, chatty.text
        run = requests.post(
            f"{base}/api/v1/tasks/{chatty.json()['id']}/trigger", headers=auth, timeout=10
        ).json()
        events = _sse_lines(f"{base}/api/v1/executions/{run['execution_id']}/logs", auth)
        assert any(e.endswith("[stdout] line-3") for e in events), events
        assert events[-1] == "end: success", events

        # The beat fires an interval task; a DAG fans out as a Celery chord (results).
        ticking = requests.post(
            f"{base}/api/v1/tasks",
            json={
                "name": "ticking",
                "schedule": {"type": "interval", "expression": "1s"},
                "handler": {"type": "python", "callable": "noop"},
            },
            headers=auth,
            timeout=10,
        )
        assert ticking.status_code == 201, ticking.text
        definition = json.loads(open("dags/definitions/fan-out.json").read())  # noqa: SIM115
        definition["schedule"] = {"type": "manual"}
        dag = requests.post(f"{base}/api/v1/dags", json=definition, headers=auth, timeout=10)
        assert dag.status_code == 201, dag.text
        triggered = requests.post(
            f"{base}/api/v1/dags/{dag.json()['id']}/trigger", json={}, headers=auth, timeout=10
        )
        assert triggered.status_code == 202, triggered.text
        wait_until(
            lambda: (
                TaskExecution.platform.filter(
                    task_id=ticking.json()["id"], status="success"
                ).count()
                >= 2
            ),
            timeout=60,
            message="two fires of the interval task",
        )
        wait_until(
            lambda: DagRun.platform.filter(dag_id=dag.json()["id"], status="success").exists(),
            timeout=90,
            message="the fan-out DAG to succeed",
        )

        # A cancel reaches a running run; /metrics answers; Flower sees the worker and the
        # queues (events and remote control, queue lengths).
        sleeper = requests.post(
            f"{base}/api/v1/tasks",
            json={
                "name": "sleeper",
                "schedule": {"type": "manual"},
                "handler": {"type": "shell", "command": ["sleep", "60"]},
            },
            headers=auth,
            timeout=10,
        ).json()
        sleeping = requests.post(
            f"{base}/api/v1/tasks/{sleeper['id']}/trigger", headers=auth, timeout=10
        ).json()
        wait_until(
            lambda: TaskExecution.platform.get(id=sleeping["execution_id"]).status == "running",
            timeout=30,
            message="the sleeper to run",
        )
        cancel = requests.post(
            f"{base}/api/v1/executions/{sleeping['execution_id']}/cancel", headers=auth, timeout=10
        )
        assert cancel.status_code in (200, 202), cancel.text
        wait_until(
            lambda: TaskExecution.platform.get(id=sleeping["execution_id"]).status == "cancelled",
            timeout=30,
            message="the cancel",
        )
        metrics = requests.get(
            f"{base}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10
        )
        assert metrics.status_code == 200 and "scheduler_runs_waiting" in metrics.text
        workers = _get(f"{flower.extra['url']}/api/workers?refresh=1", auth=FLOWER_LOGIN)
        assert workers is not None and workers.status_code == 200, workers
        assert any(name.startswith("acl-") for name in workers.json()), workers.text
        broker = _get(f"{flower.extra['url']}/broker", auth=FLOWER_LOGIN)
        assert broker is not None and broker.status_code == 200

        time.sleep(1)  # heartbeats, a few more beat ticks and Flower's event polls
        for process in processes:
            assert process.alive(), f"{process.name} exited:\n{process.log()[-3000:]}"
        # Nothing any process did was refused, on either server, but the startup check's
        # CONFIG GET (scheduler.E001), which Celery's Django fixup runs in every process and
        # only the web tier's user may ask: elsewhere the check stays silent.
        refused = [
            entry
            for entry in queue.refusals() + live.refusals()
            if not (entry["object"] == "config|get" and entry["username"] != "web")
        ]
        assert refused == [], refused
    except AssertionError:
        print(dump_logs(*processes))
        print("refused:", queue.refusals(), live.refusals())
        raise
    finally:
        for process in reversed(processes):
            process.stop(timeout=15)

    _attack_with_each_user(queue, live, tail=f"sched:logs:{run['execution_id']}")


def _attack_with_each_user(queue, live, *, tail: str) -> None:
    """What someone holding one user's password (a compromised process) can still not do."""
    refused = (redis.exceptions.NoPermissionError, redis.AuthenticationError)
    # No credentials: nothing at all.
    for server in (queue, live):
        with pytest.raises(redis.AuthenticationError):
            server.client().ping()
    worker = queue.client("worker")
    for command in (
        ("KEYS", "*"),
        ("CONFIG", "GET", "*"),
        ("FLUSHALL",),
        ("CLIENT", "LIST"),
        ("ACL", "LIST"),
        ("GET", "other-app:secret"),
        ("SORT", "normal", "BY", "nosort", "GET", "*"),
    ):
        with pytest.raises(refused):
            worker.execute_command(*command)
    # The live-log Redis: a worker appends but cannot read any tenant's tail, not even in
    # a script of its own.
    live_worker = live.client("worker")
    live_worker.xadd(tail, {"line": "written"})
    for command in (("XRANGE", tail, "-", "+"), ("XREAD", "STREAMS", tail, "0"), ("DUMP", tail)):
        with pytest.raises(refused):
            live_worker.execute_command(*command)
    with pytest.raises(redis.ResponseError, match="can't run this command"):
        live_worker.eval("return redis.call('XRANGE', KEYS[1], '-', '+')", 1, tail)
    assert live.client("web").xrange(tail)  # the web tier reads it
    with pytest.raises(refused):
        live.client("web").xadd(tail, {"line": "forged"})
    # The web tier and the beat ring doorbells but take none; Flower and KEDA read lengths.
    for name in ("web", "beat"):
        client = queue.client(name)
        assert client.llen("normal") >= 0
        with pytest.raises(refused):
            client.execute_command("RPOP", "normal")
        with pytest.raises(refused):
            client.execute_command("LRANGE", "normal", "0", "-1")
    for name in ("flower", "keda"):
        client = queue.client(name)
        assert client.llen("normal") >= 0
        with pytest.raises(refused):
            client.get("sched:scheduler:leader")
        with pytest.raises(refused):
            client.execute_command("RPOP", "normal")
