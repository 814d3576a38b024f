"""Container handler: argv building and refusal without a runtime (no engine in tests)."""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import pytest

from handler_contract.base import BufferedLogSink, HandlerContext
from workers.handlers import run_handler
from workers.handlers.container import (
    NO_RUNTIME_MESSAGE,
    ContainerRuntimeError,
    build_container_argv,
    container_resource_flags,
    run_container,
)


def make_ctx() -> HandlerContext:
    return HandlerContext(
        execution_id="exec-c",
        attempt=1,
        timeout_seconds=5,
        parameters={"p": 1},
        log=BufferedLogSink(64 * 1024),
        cancel_event=threading.Event(),
    )


CONFIG = {"type": "container", "image": "alpine:3.20", "command": ["echo", "hi"]}


LOCKDOWN = [
    "--network",
    "none",
    "--read-only",
    "--tmpfs",
    "/tmp",
    "--cap-drop",
    "ALL",
    "--security-opt",
    "no-new-privileges",
    "--user",
    "65534:65534",
]


def test_argv_puts_options_before_the_image_and_the_command_after_it() -> None:
    config = {**CONFIG, "environment": {"API_URL": "https://x", "MODE": "fast"}}
    env = {"API_URL": "https://x", "MODE": "fast", "TASK_ATTEMPT": "1"}
    argv = build_container_argv(config, "podman", task_env=env)
    assert argv[:3] == ["podman", "run", "--rm"]
    assert argv[3 : 3 + len(LOCKDOWN)] == LOCKDOWN
    assert argv[-3:] == ["alpine:3.20", "echo", "hi"]
    options = argv[3 + len(LOCKDOWN) : -3]
    pairs = list(zip(options[::2], options[1::2], strict=True))
    assert pairs == [
        ("-e", "API_URL=https://x"),
        ("-e", "MODE=fast"),
        ("-e", "TASK_ATTEMPT=1"),
        ("--pids-limit", "4096"),
    ]


def test_argv_without_command_ends_with_the_image() -> None:
    argv = build_container_argv({"type": "container", "image": "busybox"}, "/usr/bin/docker")
    assert argv[0] == "/usr/bin/docker"
    assert argv[-1] == "busybox"


def test_argv_interactive_and_resource_options() -> None:
    config = {
        **CONFIG,
        "resource_requirements": {
            "memory_bytes": 268435456,
            "processes": 64,
            "open_files": 256,
            "cpu_seconds": 10,
            "file_size_bytes": 1000,
        },
    }
    argv = build_container_argv(config, "docker", interactive=True)
    assert argv[3 + len(LOCKDOWN)] == "-i"
    joined = " ".join(argv)
    assert "--memory 268435456" in joined
    assert "--pids-limit 64" in joined
    assert "--ulimit nofile=256:256" in joined
    assert "--ulimit cpu=10:10" in joined
    assert "--ulimit fsize=1000:1000" in joined
    assert joined.endswith("alpine:3.20 echo hi")


def test_image_that_looks_like_an_option_is_refused() -> None:
    with pytest.raises(ValueError):
        build_container_argv({"type": "container", "image": "--privileged"}, "docker")


@pytest.mark.parametrize("runtime", [None, ""])
def test_run_container_refuses_without_a_runtime(runtime: str | None) -> None:
    with pytest.raises(ContainerRuntimeError, match="none is configured on this installation"):
        run_container(CONFIG, make_ctx(), container_runtime=runtime)
    with pytest.raises(ContainerRuntimeError, match="none is configured"):
        build_container_argv(CONFIG, runtime)  # type: ignore[arg-type]


def test_unsupported_runtime_is_refused() -> None:
    with pytest.raises(ContainerRuntimeError, match="unsupported"):
        build_container_argv(CONFIG, "sh")


def test_dispatcher_reports_missing_runtime_as_invalid_config() -> None:
    outcome = run_handler(CONFIG, make_ctx())
    assert outcome.status == "failed"
    assert outcome.error_class == "invalid_config"
    assert outcome.transient is False
    assert NO_RUNTIME_MESSAGE in outcome.error_message
    assert outcome.error_message.startswith("handler.type")


def test_resources_become_cpus_and_memory_flags() -> None:
    flags = container_resource_flags({"cpu": 0.5, "memory_bytes": 256 * 1024**2})
    assert flags[:4] == ["--cpus", "0.5", "--memory", str(256 * 1024**2)]


def test_egress_gets_a_network_only_when_the_tenant_is_allowed() -> None:
    config = {**CONFIG, "network": "egress"}
    assert "bridge" in build_container_argv(config, "docker", egress_allowed=True)
    assert build_container_argv(config, "docker", egress_allowed=False)[3:5] == [
        "--network",
        "none",
    ]
    refused = run_container(config, make_ctx(), container_runtime="docker")
    assert (refused.status, refused.error_class) == ("failed", "egress_not_allowed")


FAKE_RUNTIME = """#!{python}
import json, os, sys
with open({record!r}, "w") as fh:
    json.dump({{"argv": sys.argv, "env": dict(os.environ)}}, fh)
print(json.dumps({{"fake": "ran"}}))
"""


def test_the_tenants_environment_reaches_the_container_never_the_runtime_cli(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real executable named docker records what it was started with."""
    record = tmp_path / "record.json"
    runtime = tmp_path / "docker"
    runtime.write_text(FAKE_RUNTIME.format(python=sys.executable, record=str(record)))
    runtime.chmod(0o755)
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/operator-docker.sock")
    monkeypatch.setenv("SECRET_KEY", "worker-secret-key-value")
    config = {
        **CONFIG,
        "environment": {"DOCKER_HOST": "tcp://attacker.example:2375", "API_TOKEN": "t0ken"},
        "resource_requirements": {"memory_bytes": 128 * 1024**2},
    }
    ctx = make_ctx()
    outcome = run_handler(config, ctx, container_runtime=str(runtime))
    assert outcome.status == "success", outcome.error_message
    assert outcome.result == {"fake": "ran"}
    seen = json.loads(record.read_text())
    # The CLI talks to the operator's daemon, whatever the task says.
    assert seen["env"]["DOCKER_HOST"] == "unix:///run/operator-docker.sock"
    assert "API_TOKEN" not in seen["env"]
    assert "SECRET_KEY" not in seen["env"]
    assert "TASK_PARAMETERS" not in seen["env"]
    argv = seen["argv"]
    assert argv[1:3] == ["run", "--rm"]
    assert argv[3 : 3 + len(LOCKDOWN)] == LOCKDOWN
    assert argv[argv.index("DOCKER_HOST=tcp://attacker.example:2375") - 1 :][:2] == [
        "-e",
        "DOCKER_HOST=tcp://attacker.example:2375",
    ]
    assert "API_TOKEN=t0ken" in argv
    assert "--memory" in argv and argv[argv.index("--memory") + 1] == str(128 * 1024**2)
    assert argv[-3:] == ["alpine:3.20", "echo", "hi"]
    # The logged command line names the variables but not their values.
    assert "t0ken" not in ctx.log.text()
