"""Handler config validation: every error names the offending field."""

from __future__ import annotations

from typing import Any

import pytest

from handler_contract.base import HandlerConfigError
from handler_contract.validation import validate_handler_config

REGISTRY = frozenset({"echo", "noop"})


def validate(config: Any, runtime: str | None = None) -> dict[str, Any]:
    return validate_handler_config(
        config, python_registry_names=REGISTRY, container_runtime=runtime
    )


def error_for(config: Any, runtime: str | None = None) -> HandlerConfigError:
    with pytest.raises(HandlerConfigError) as info:
        validate(config, runtime)
    return info.value


def test_config_error_carries_field_and_message() -> None:
    error = HandlerConfigError("handler.command", "is required")
    assert isinstance(error, ValueError)
    assert error.field == "handler.command"
    assert error.message == "is required"
    assert str(error) == "handler.command: is required"


# --- type ---------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [{}, {"type": "ftp"}, {"type": None}, {"type": 3}])
def test_unknown_type_lists_the_allowed_ones(config: dict[str, Any]) -> None:
    error = error_for(config)
    assert error.field == "handler.type"
    assert "shell, http, python" in error.message
    assert "container" not in error.message


def test_unknown_type_lists_container_when_a_runtime_is_configured() -> None:
    assert "container" in error_for({"type": "ftp"}, runtime="docker").message


def test_not_a_dict() -> None:
    assert error_for(["shell"]).field == "handler"


def test_container_without_runtime_is_refused_with_a_clear_message() -> None:
    error = error_for({"type": "container", "image": "alpine"})
    assert error.field == "handler.type"
    assert error.message == (
        "container handlers need a container runtime; none is configured on this installation"
    )


def test_unknown_keys_are_rejected() -> None:
    error = error_for({"type": "shell", "command": ["true"], "enviroment": {}})
    assert error.field == "handler.enviroment"


# --- shell --------------------------------------------------------------------------------


def test_valid_shell_config_is_normalized() -> None:
    config = {
        "type": "shell",
        "command": ["python3", "-c", "print(1)"],
        "environment": {"A": "1"},
        "resource_requirements": {"memory_bytes": 10**9, "cpu_seconds": 30},
    }
    assert validate(config) == config


def test_shell_defaults() -> None:
    assert validate({"type": "shell", "command": ["true"]}) == {
        "type": "shell",
        "command": ["true"],
        "environment": {},
    }


@pytest.mark.parametrize(
    ("command", "field"),
    [
        (None, "handler.command"),
        ("echo hi && rm -rf /", "handler.command"),
        ([], "handler.command"),
        (["echo", 3], "handler.command[1]"),
        (["", "x"], "handler.command[0]"),
        (["echo", "a\x00b"], "handler.command[1]"),
    ],
)
def test_shell_command_must_be_an_argv_list(command: Any, field: str) -> None:
    assert error_for({"type": "shell", "command": command}).field == field


def test_shell_string_command_error_explains_argv() -> None:
    assert "argv" in error_for({"type": "shell", "command": "ls -l"}).message


def test_working_directory_is_forbidden() -> None:
    error = error_for({"type": "shell", "command": ["ls"], "working_directory": "/etc"})
    assert error.field == "handler.working_directory"


@pytest.mark.parametrize(
    ("environment", "field"),
    [
        ("A=1", "handler.environment"),
        ({"A": 1}, "handler.environment.A"),
        ({"1BAD": "x"}, "handler.environment.1BAD"),
        ({"A=B": "x"}, "handler.environment.A=B"),
        ({"TASK_ATTEMPT": "9"}, "handler.environment.TASK_ATTEMPT"),
    ],
)
def test_shell_environment(environment: Any, field: str) -> None:
    config = {"type": "shell", "command": ["env"], "environment": environment}
    assert error_for(config).field == field


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        ([], "handler.resource_requirements"),
        ({"gpus": 1}, "handler.resource_requirements.gpus"),
        ({"memory_bytes": -1}, "handler.resource_requirements.memory_bytes"),
        ({"memory_bytes": "1G"}, "handler.resource_requirements.memory_bytes"),
        ({"open_files": True}, "handler.resource_requirements.open_files"),
    ],
)
def test_shell_resource_requirements(resources: Any, field: str) -> None:
    config = {"type": "shell", "command": ["env"], "resource_requirements": resources}
    assert error_for(config).field == field


# --- http ---------------------------------------------------------------------------------


def test_http_defaults_and_normalization() -> None:
    assert validate({"type": "http", "url": "https://api.example.com/hook"}) == {
        "type": "http",
        "url": "https://api.example.com/hook",
        "method": "POST",
        "headers": {},
    }
    full = validate(
        {
            "type": "http",
            "url": "http://example.com",
            "method": "get",
            "headers": {"X-A": "b"},
            "body": {"k": [1, None]},
            "timeout_seconds": 5,
            "expected_status": [204, 200, 200],
        }
    )
    assert full["method"] == "GET"
    assert full["timeout_seconds"] == 5.0
    assert full["expected_status"] == [200, 204]
    assert full["body"] == {"k": [1, None]}


@pytest.mark.parametrize(
    "url",
    [
        None,
        "",
        "ftp://example.com/x",
        "file:///etc/passwd",
        "example.com/path",
        "http://",
        "http://user:pw@example.com/",
        "http://example.com:99999/",
        "http://exa mple.com/",
    ],
)
def test_http_url_errors(url: Any) -> None:
    assert error_for({"type": "http", "url": url}).field == "handler.url"


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"method": "TRACE"}, "handler.method"),
        ({"method": 1}, "handler.method"),
        ({"headers": ["a"]}, "handler.headers"),
        ({"headers": {"X-A": 1}}, "handler.headers.X-A"),
        ({"headers": {"Bad Name": "x"}}, "handler.headers.Bad Name"),
        ({"headers": {"X-A": "a\r\nInjected: 1"}}, "handler.headers.X-A"),
        ({"headers": {"Host": "internal"}}, "handler.headers.Host"),
        ({"body": {1, 2}}, "handler.body"),
        ({"body": float("nan")}, "handler.body"),
        ({"timeout_seconds": 0}, "handler.timeout_seconds"),
        ({"timeout_seconds": "5"}, "handler.timeout_seconds"),
        ({"timeout_seconds": True}, "handler.timeout_seconds"),
        ({"expected_status": []}, "handler.expected_status"),
        ({"expected_status": 200}, "handler.expected_status"),
        ({"expected_status": [200, 99]}, "handler.expected_status[1]"),
    ],
)
def test_http_field_errors(extra: dict[str, Any], field: str) -> None:
    config = {"type": "http", "url": "https://example.com/", **extra}
    assert error_for(config).field == field


# --- python -------------------------------------------------------------------------------


def test_python_registered_callable() -> None:
    assert validate({"type": "python", "callable": "echo"}) == {
        "type": "python",
        "callable": "echo",
    }


@pytest.mark.parametrize("name", [None, "", "os.system", "unknown"])
def test_python_unregistered_callable(name: Any) -> None:
    error = error_for({"type": "python", "callable": name})
    assert error.field == "handler.callable"


def test_python_error_lists_registered_names() -> None:
    assert "echo, noop" in error_for({"type": "python", "callable": "nope"}).message


# --- container ----------------------------------------------------------------------------


def test_container_config_with_runtime() -> None:
    config = {"type": "container", "image": "alpine:3.20", "command": ["echo", "hi"]}
    assert validate(config, runtime="docker") == {
        "type": "container",
        "image": "alpine:3.20",
        "command": ["echo", "hi"],
        "environment": {},
    }


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"image": None}, "handler.image"),
        ({"image": "--privileged"}, "handler.image"),
        ({"image": "alpine latest"}, "handler.image"),
        ({"image": "alpine", "command": "echo hi"}, "handler.command"),
    ],
)
def test_container_errors(extra: dict[str, Any], field: str) -> None:
    config = {"type": "container", **extra}
    assert error_for(config, runtime="podman").field == field
