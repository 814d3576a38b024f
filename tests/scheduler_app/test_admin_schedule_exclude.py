"""The admin judges `schedule_exclude` as the API does: a bad rule is a form error naming
the rule, and saves nothing."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from scheduler_app.models import TaskDefinition

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456")
    client.force_login(user)
    return client


def _form(tenant, name: str, exclude: str) -> dict:
    return {
        "tenant": tenant.id,
        "name": name,
        "description": "",
        "schedule_type": "cron",
        "schedule_expression": "0 9 * * *",
        "timezone": "America/New_York",
        "schedule_exclude": exclude,
        "handler_type": "python",
        "handler_config": '{"callable": "noop"}',
        "parameters": "{}",
        "timeout_seconds": 300,
        "max_attempts": 3,
        "backoff": "exponential",
        "base_delay_seconds": 10,
        "max_delay_seconds": 3600,
        "priority": 5,
        "enabled": "on",
        "tags": "[]",
        "notifications": "{}",
        "catchup": "latest",
        "overlap": "allow",
        "jitter_seconds": 0,
    }


def test_a_bad_rule_is_a_form_error_naming_it(staff_client, tenant):
    url = reverse("admin:scheduler_app_taskdefinition_add")
    response = staff_client.post(url, _form(tenant, "bad", '[{"calendar": "holidays:XX"}]'))
    assert response.status_code == 200
    assert b"schedule.exclude[0].calendar" in response.content
    assert not TaskDefinition.platform.filter(name="bad").exists()


def test_good_rules_are_saved(staff_client, tenant):
    url = reverse("admin:scheduler_app_taskdefinition_add")
    response = staff_client.post(url, _form(tenant, "good", '[{"calendar": "holidays:US"}]'))
    assert response.status_code == 302, response.content[:2000]
    task = TaskDefinition.platform.get(name="good")
    assert task.schedule_exclude == [{"calendar": "holidays:US"}]
    assert task.next_fire_at is not None
