"""The SDK's pure parts: Python definitions render to the API's JSON, the plan's diff, the
file loader, and the credential file's permissions."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import yaml

from dags.spec import parse_dag_spec
from scheduler_sdk import (
    Credentials,
    CredentialStore,
    Dag,
    DefinitionError,
    RetryPolicy,
    Task,
    cron,
    interval,
    load_definitions,
    python,
    shell,
)
from scheduler_sdk.plan import _diff, dag_diff, dag_normalized, task_diff

ROOT = Path(__file__).resolve().parents[2]

ETL_YAML = """\
dag: etl
schedule: {type: cron, expression: "0 2 * * *", timezone: Europe/Berlin}
failure_policy: fail_all
tasks:
  - id: extract
    handler: {type: python, callable: echo}
    parameters: {day: today}
  - id: clean
    handler: {type: shell, command: [python3, clean.py]}
    depends_on: [extract]
  - id: audit
    handler: {type: python, callable: noop}
    depends_on: [extract]
  - id: load
    task: loader
    depends_on: [clean, audit]
    trigger_rule: all_done
    retry_policy: {max_attempts: 3, backoff: exponential}
"""


def etl_in_python() -> Dag:
    etl = Dag("etl", schedule=cron("0 2 * * *", tz="Europe/Berlin"), failure_policy="fail_all")
    extract = etl.node("extract", handler=python("echo"), parameters={"day": "today"})
    clean = etl.node("clean", handler=shell("python3", "clean.py"))
    audit = etl.node("audit", handler=python("noop"))
    load = etl.node(
        "load",
        task=Task("loader", handler=python("noop")),
        trigger_rule="all_done",
        retry=RetryPolicy(max_attempts=3, backoff="exponential"),
    )
    extract >> [clean, audit] >> load
    return etl


def test_a_dag_in_python_renders_exactly_its_yaml_twin():
    assert etl_in_python().render() == yaml.safe_load(ETL_YAML)
    assert parse_dag_spec(etl_in_python().render()) == parse_dag_spec(yaml.safe_load(ETL_YAML))


def test_rshift_links_both_ways_and_chains():
    dag = Dag("chain")
    a, b, c = (dag.node(name, handler=python("noop")) for name in "abc")
    a >> b >> c
    assert [n.render().get("depends_on") for n in (a, b, c)] == [None, ["a"], ["b"]]
    d = dag.node("d", handler=python("noop"))
    [a, c] >> d
    assert d.depends_on == ["a", "c"]


def test_a_task_renders_only_what_was_given():
    task = Task("hello", schedule=interval("10s"), handler=shell("echo", "hi"), priority=3)
    assert task.render() == {
        "name": "hello",
        "schedule": {"type": "interval", "expression": "10s"},
        "handler": {"type": "shell", "command": ["echo", "hi"]},
        "priority": 3,
    }
    assert Task("m", handler=python("noop")).render()["schedule"] == {"type": "manual"}


def test_a_node_needs_exactly_one_of_handler_or_task():
    with pytest.raises(ValueError, match="exactly one"):
        Dag("x").node("a")
    with pytest.raises(ValueError, match="exactly one"):
        Dag("x").node("a", handler=python("noop"), task="t")
    dag = Dag("x")
    dag.node("a", handler=python("noop"))
    with pytest.raises(ValueError, match="already has a node"):
        dag.node("a", handler=python("noop"))


@pytest.mark.parametrize("path", sorted((ROOT / "dags" / "definitions").glob("*")))
def test_the_client_normalizes_a_dag_as_the_server_does(path):
    """The plan compares definitions the way dags.spec stores them; a drift would show
    changes that are not there (or hide real ones)."""
    for definition in load_definitions(path):
        raw = definition.render()
        assert dag_normalized(raw) == parse_dag_spec(raw)
        assert dag_diff(parse_dag_spec(raw), raw) == []
    twin = etl_in_python().render()
    assert dag_normalized(twin) == parse_dag_spec(twin)


def test_a_dag_diff_names_the_node_and_key():
    stored = parse_dag_spec(yaml.safe_load(ETL_YAML))
    edited = yaml.safe_load(ETL_YAML)
    edited["tasks"][0]["parameters"]["day"] = "yesterday"
    del edited["tasks"][2]
    edited["tasks"][2]["depends_on"] = ["clean"]
    lines = {(line.op, line.path) for line in dag_diff(stored, edited)}
    assert ("~", "tasks.extract.parameters.day") in lines
    assert ("-", "tasks.audit.id") in lines
    assert ("~", "tasks.load.depends_on") in lines


def test_a_task_diff_covers_the_keys_the_definition_names():
    server = {
        "name": "t",
        "schedule": {"type": "interval", "expression": "10s", "timezone": "UTC"},
        "handler": {"type": "shell", "command": ["echo"], "environment": {}},
        "priority": 5,
        "description": "kept",
    }
    same = {"name": "t", "schedule": {"type": "interval", "expression": "10s"}}
    same["handler"] = {"type": "shell", "command": ["echo"]}
    assert task_diff(server, same) == []
    changed = {**same, "schedule": {"type": "interval", "expression": "20s"}, "priority": 2}
    assert [(d.op, d.path, d.old, d.new) for d in task_diff(server, changed)] == [
        ("~", "priority", 5, 2),
        ("~", "schedule.expression", "10s", "20s"),
    ]
    created = _diff({}, same)  # what a create shows
    assert {(d.op, d.path) for d in created} == {
        ("+", "name"),
        ("+", "schedule.type"),
        ("+", "schedule.expression"),
        ("+", "handler.type"),
        ("+", "handler.command"),
    }
    server["handler"]["environment"] = {"A": "1"}
    assert [(d.op, d.path) for d in task_diff(server, same)] == [("-", "handler.environment.A")]


def test_files_yaml_streams_json_lists_and_the_file_only_tenant_key(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.yaml").write_text(
        "name: one\nschedule: {type: manual}\nhandler: {type: python, callable: noop}\n---\n"
        + ETL_YAML.replace("dag: etl", "dag: etl\ntenant: demo")
    )
    (tmp_path / "sub" / "b.json").write_text(
        json.dumps([{"name": "two", "schedule": {"type": "manual"}, "handler": {"type": "x"}}])
    )
    (tmp_path / "notes.txt").write_text("not a definition")
    loaded = load_definitions(tmp_path)
    assert [(d.kind, d.name) for d in loaded] == [("task", "one"), ("dag", "etl"), ("task", "two")]
    assert "tenant" not in loaded[1].render()
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    with pytest.raises(DefinitionError, match=r"broken\.yaml: cannot parse"):
        load_definitions(tmp_path)
    with pytest.raises(DefinitionError, match="no such file"):
        load_definitions(tmp_path / "missing")


def test_the_credential_file_is_the_owners_alone_whatever_the_umask(tmp_path):
    store = CredentialStore(tmp_path / "config")
    store.path.parent.mkdir()
    store.path.write_text("{}")
    os.chmod(store.path, 0o644)
    previous = os.umask(0)
    try:
        store.save(Credentials(url="http://x", username="u", access="a", refresh="r"))
    finally:
        os.umask(previous)
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert store.load() == Credentials(url="http://x", username="u", access="a", refresh="r")
    assert [p.name for p in store.directory.iterdir()] == ["credentials.json"]
    assert store.clear() and store.load() is None


def test_a_dag_takes_a_tasks_scheduling_policy():
    policy = {"catchup": "none", "jitter_seconds": 30, "start_at": "2026-03-01T00:00:00Z"}
    dag = Dag("windowed", schedule=cron("0 2 * * *"), policy=policy)
    dag.node("a", handler=python("noop"))
    rendered = dag.render()
    assert rendered["policy"] == policy
    assert parse_dag_spec(rendered)["catchup"] == "none"
