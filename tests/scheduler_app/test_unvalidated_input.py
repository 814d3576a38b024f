"""Input that used to be a 500, played as a tenant's user: each is a 400 (or the form's error)
naming the field, and nothing is written. `"²".isdigit()` is true and `int("²")` raises; Python
refuses to read an int of more than 4,300 digits; and the JSON decoder and PyYAML recurse once
per level of nesting."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from django.test import Client

from dags.models import Dag, DagRun
from scheduler_app.models import TaskDefinition
from scripts.import_graph import PACKAGES
from tests.api_clients import PASSWORD, staff_client
from tests.dashboard.conftest import make_dag
from tests.factories import make_task

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
PRODUCT = PACKAGES
NOT_ASCII_DIGITS = ["²", "٣", "１"]  # superscript two, Arabic-Indic three, fullwidth one
DEEP = "[" * 100_000 + "]" * 100_000
LONG_NUMBER = "9" * 5000


def _field(response) -> str:
    assert response.status_code == 400, response.content
    return response.json()["field"]


@pytest.mark.parametrize("count", [*NOT_ASCII_DIGITS, LONG_NUMBER, "0", "1001", "-1", " 5"])
def test_schedule_preview_count_of_unicode_digits_is_a_400(api, tenant, count):
    task = make_task(tenant)
    response = api.get(f"/api/v1/tasks/{task.id}/schedule-preview", {"count": count})
    assert _field(response) == "count"


def test_schedule_preview_count_still_reads_ascii_digits(api, tenant):
    task = make_task(tenant)
    response = api.get(f"/api/v1/tasks/{task.id}/schedule-preview", {"count": "3"})
    assert response.status_code == 200
    assert len(response.json()["fire_times"]) == 3


@pytest.mark.parametrize("member_id", [*NOT_ASCII_DIGITS, LONG_NUMBER, "abc", "0"])
def test_members_path_of_unicode_digits_is_a_400(api, tenant, member_id):
    assert _field(api.get(f"/api/v1/members/{member_id}")) == "member_id"
    assert _field(api.delete(f"/api/v1/members/{member_id}")) == "member_id"
    assert tenant.memberships.count() == 1


@pytest.mark.parametrize("value", [*NOT_ASCII_DIGITS, LONG_NUMBER])
def test_admin_query_numbers_of_unicode_digits_are_400s(db, value):
    staff = staff_client()
    assert _field(staff.get("/api/v1/admin/metrics", {"window_hours": value})) == "window_hours"
    assert _field(staff.post(f"/api/v1/admin/scheduler/failover?shard={value}")) == "shard"


def _dag_with_schedule(expression: str) -> dict:
    return {
        "dag": "nines",
        "schedule": {"type": "interval", "expression": expression},
        "tasks": [{"id": "a", "handler": {"type": "python", "callable": "noop"}}],
    }


@pytest.mark.parametrize("expression", ["9" * 5000 + "s", "1s" + " " * 300, "*/" + "9" * 5000])
def test_a_dag_schedule_of_5000_digits_is_a_400(api, expression):
    response = api.post("/api/v1/dags", _dag_with_schedule(expression), format="json")
    assert _field(response) == "schedule.expression"
    assert "longer than 255" in response.json()["message"]
    assert not Dag.platform.exists()


def test_a_task_cron_of_5000_digits_is_a_400(api):
    spec = {
        "name": "nines",
        "schedule": {"type": "cron", "expression": "9" * 5000 + " * * * *"},
        "handler": {"type": "python", "callable": "noop"},
    }
    assert _field(api.post("/api/v1/tasks", spec, format="json")) == "schedule.expression"
    assert not TaskDefinition.platform.exists()


# --- the dashboard's JSON and YAML fields ---------------------------------------------------
@pytest.fixture
def admin_browser(tenant_and_user) -> Client:
    client = Client()
    assert client.login(username=tenant_and_user[1].username, password=PASSWORD)
    return client


@pytest.mark.parametrize(
    ("parameters", "named"),
    [(DEEP, "nested deeper than 64"), ("[" * 70 + "]" * 70, "nested deeper than 64")],
)
def test_a_100k_deep_json_in_the_dag_trigger_is_refused(admin_browser, tenant, parameters, named):
    dag = make_dag(tenant)
    response = admin_browser.post(
        f"/dashboard/dags/{dag.id}/trigger", {"parameters": parameters}, follow=True
    )
    assert response.status_code == 200
    text = response.content.decode()
    assert "Nothing was triggered. Parameters:" in text and named in text
    assert not DagRun.platform.exists()


def test_a_5000_digit_number_in_the_dag_trigger_is_refused(admin_browser, tenant):
    dag = make_dag(tenant)
    response = admin_browser.post(
        f"/dashboard/dags/{dag.id}/trigger", {"parameters": f'{{"n": {LONG_NUMBER}}}'}, follow=True
    )
    assert "Nothing was triggered. Parameters:" in response.content.decode()
    assert not DagRun.platform.exists()


@pytest.mark.parametrize("field", ["parameters", "handler_config", "notifications"])
@pytest.mark.parametrize("text", [DEEP, f'{{"n": {LONG_NUMBER}}}'])
def test_deep_or_huge_json_in_the_task_form_is_a_form_error(admin_browser, field, text):
    form = {
        "name": "deep",
        "schedule_type": "manual",
        "timezone": "UTC",
        "handler_type": "python",
        "handler_config": '{"callable": "noop"}',
        "catchup": "latest",
        "overlap": "allow",
        "backoff": "exponential",
        field: text,
    }
    response = admin_browser.post("/dashboard/tasks/new", form)
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert field in errors, errors
    assert re.search(r"nested deeper than 64|more digits than can be read", str(errors[field]))
    assert not TaskDefinition.platform.exists()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (DEEP, "nested too deeply"),
        ("dag: x\ntasks: " + "[" * 70 + "]" * 70, "nested deeper than 64"),
        (f"dag: x\nsla_seconds: {LONG_NUMBER}\ntasks: []", "not valid YAML or JSON"),
        ("dag: x\nstarted: 2030-13-45\ntasks: []", "not valid YAML or JSON"),
    ],
)
def test_deep_or_huge_text_in_the_dag_editor_is_a_400(admin_browser, text, said):
    response = admin_browser.post("/dashboard/dags/new", {"definition": text})
    assert response.status_code == 400
    assert said in response.content.decode()
    assert not Dag.platform.exists()


# --- the guard itself ---------------------------------------------------------------------
def _unguarded_isdigit_calls(tree: ast.AST) -> list[int]:
    """Lines of `x.isdigit()` calls not joined by `and` to `x.isascii()` on the same `x`."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    lines = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "isdigit"
        ):
            continue
        subject = ast.unparse(node.func.value)
        joined = parents.get(node)
        guarded = isinstance(joined, ast.BoolOp) and isinstance(joined.op, ast.And)
        if not guarded or not any(
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "isascii"
            and ast.unparse(value.func.value) == subject
            for value in joined.values
        ):
            lines.append(node.lineno)
    return lines


def test_no_isdigit_guard_without_an_ascii_check():
    """`.isdigit()` alone lets "²" through to int(): every call is `and`-ed with `.isascii()`
    on the same value."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in PRODUCT
        for path in (ROOT / package).rglob("*.py")
        for line in _unguarded_isdigit_calls(ast.parse(path.read_text()))
    ]
    assert offenders == []


def test_the_guard_check_finds_a_bare_isdigit():
    assert _unguarded_isdigit_calls(ast.parse("ok = raw.isdigit() and int(raw)")) == [1]
    assert _unguarded_isdigit_calls(ast.parse("ok = a.isascii() and b.isdigit()")) == [1]
    assert _unguarded_isdigit_calls(ast.parse("ok = raw.isascii() and raw.isdigit()")) == []
