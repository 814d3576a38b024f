"""A Python SDK for the scheduler's REST API: define tasks and DAGs as code and apply them.

from scheduler_sdk import Client, Dag, Task, cron, interval, python, shell

client = Client.from_environment()          # the `schedctl login`, or SCHEDCTL_API_KEY
hello = Task("say-hello", schedule=interval("10s"), handler=shell("echo", "hi"))
etl = Dag("etl", schedule=cron("0 2 * * *", tz="Europe/Berlin"))
extract = etl.node("extract", handler=python("echo"))
load = etl.node("load", handler=shell("python3", "load.py"))
extract >> load
plan = client.apply([hello, etl])           # created or updated, matched by name
"""

from scheduler_sdk.client import Client
from scheduler_sdk.credentials import Credentials, CredentialStore
from scheduler_sdk.definitions import (
    Dag,
    Node,
    RetryPolicy,
    Task,
    cron,
    http,
    interval,
    manual,
    once,
    python,
    shell,
)
from scheduler_sdk.errors import (
    ApiError,
    Conflict,
    DefinitionError,
    EndpointMissing,
    Forbidden,
    NotFound,
    NotLoggedIn,
    RateLimited,
    SchedulerError,
    Unauthorized,
)
from scheduler_sdk.files import FileDefinition, load_definitions
from scheduler_sdk.models import DagInfo, DagRun, Execution, LogEnd, LogLine, TaskInfo, Triggered
from scheduler_sdk.plan import Change, DiffLine, Plan

__all__ = [
    "ApiError",
    "Change",
    "Client",
    "Conflict",
    "CredentialStore",
    "Credentials",
    "Dag",
    "DagInfo",
    "DagRun",
    "DefinitionError",
    "DiffLine",
    "EndpointMissing",
    "Execution",
    "FileDefinition",
    "Forbidden",
    "LogEnd",
    "LogLine",
    "Node",
    "NotFound",
    "NotLoggedIn",
    "Plan",
    "RateLimited",
    "RetryPolicy",
    "SchedulerError",
    "Task",
    "TaskInfo",
    "Triggered",
    "Unauthorized",
    "cron",
    "http",
    "interval",
    "load_definitions",
    "manual",
    "once",
    "python",
    "shell",
]
