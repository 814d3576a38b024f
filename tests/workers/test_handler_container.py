"""Container handler: argv building and refusal without a runtime (no engine in tests)."""

from __future__ import annotations

import threading

import pytest

from workers.handlers import run_handler
from workers.handlers.base import BufferedLogSink, HandlerContext
from workers.handlers.container import (
    NO_RUNTIME_MESSAGE,
    ContainerRuntimeError,
    build_container_argv,
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


def test_argv_puts_options_before_the_image_and_the_command_after_it() -> None:
    config = {**CONFIG, "environment": {"API_URL": "https://x", "MODE": "fast"}}
    argv = build_container_argv(config, "podman")
    assert argv[:3] == ["podman", "run", "--rm"]
    assert argv[-3:] == ["alpine:3.20", "echo", "hi"]
    options = argv[3:-3]
    pairs = list(zip(options[::2], options[1::2], strict=True))
    assert pairs == [
        ("-e", "API_URL"),
        ("-e", "MODE"),
        ("-e", "TASK_PARAMETERS"),
        ("-e", "TASK_EXECUTION_ID"),
        ("-e", "TASK_ATTEMPT"),
    ]
    # Values travel through the runtime's environment, never through argv.
    assert "https://x" not in argv


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
    assert argv[3] == "-i"
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
