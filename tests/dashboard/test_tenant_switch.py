"""The tenant is stable and visible: a page of another of the user's tenants says so and
offers the switch; an id of a tenant the user does not belong to stays a bare 404; a fresh
sign-in starts in the tenant this user last looked at."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduler_app.choices import ExecutionStatus, Role
from scheduler_app.services.tenants import membership_set
from tests.dashboard.conftest import add_execution, make_dag, make_dag_run
from tests.factories import make_task

pytestmark = pytest.mark.django_db


def test_a_page_of_another_of_my_tenants_offers_the_switch(
    signed_in, tenant_and_user, tenant_factory
):
    _, user = tenant_and_user
    beta, _ = tenant_factory("beta")
    membership_set(tenant=beta, user=user, role=Role.VIEWER)
    task = make_task(beta, name="beta-report")
    execution = add_execution(task, minutes_ago=1, status=ExecutionStatus.SUCCESS)
    dag = make_dag(beta)
    run = make_dag_run(dag)
    signed_in.get("/dashboard/?tenant=acme")
    for path in (
        f"/dashboard/tasks/{task.id}",
        f"/dashboard/executions/{execution.id}",
        f"/dashboard/dags/{dag.id}",
        f"/dashboard/dags/{dag.id}/runs/{run.id}",
    ):
        response = signed_in.get(path)
        assert response.status_code == 404, path
        page = response.content.decode()
        assert "This page is in tenant beta" in page, path
        assert f'href="{path}?tenant=beta"' in page, path
        assert "beta-report" not in page  # the object itself is not shown until switched
        switched = signed_in.get(f"{path}?tenant=beta")
        assert switched.status_code == 200, path
        signed_in.get("/dashboard/?tenant=acme")


def test_an_id_of_a_tenant_i_do_not_belong_to_is_a_bare_404(signed_in, tenant_factory):
    """The attacker (acme's admin) follows links into a tenant it is not a member of."""
    victim, _ = tenant_factory("victim")
    task = make_task(victim, name="victim-payroll")
    execution = add_execution(task, minutes_ago=1, status=ExecutionStatus.SUCCESS)
    dag = make_dag(victim)
    for path in (
        f"/dashboard/tasks/{task.id}",
        f"/dashboard/executions/{execution.id}",
        f"/dashboard/dags/{dag.id}",
        f"/dashboard/tasks/{task.id}?tenant=victim",
    ):
        response = signed_in.get(path)
        assert response.status_code == 404, path
        page = response.content.decode()
        assert "victim" not in page.replace("?tenant=victim", ""), path
        assert "btn-switch-tenant" not in page, path


def sign_out(browser: Client, remembered: str) -> None:
    """The dashboard's sign-out (the session ends); the test client's logout also drops every
    cookie, which a browser does not, so the long-lived one is put back."""
    assert browser.post("/dashboard/logout/").status_code == 302
    browser.logout()
    browser.cookies["dashboard_tenant"] = remembered


def test_a_fresh_sign_in_starts_in_the_tenant_last_looked_at(tenant_and_user, tenant_factory):
    _, user = tenant_and_user
    beta, _ = tenant_factory("beta")
    membership_set(tenant=beta, user=user, role=Role.ADMIN)
    browser = Client()
    assert browser.login(username=user.username, password="pw-123456")
    assert "· beta" in browser.get("/dashboard/?tenant=beta").content.decode()
    remembered = browser.cookies["dashboard_tenant"].value
    sign_out(browser, remembered)
    assert browser.login(username=user.username, password="pw-123456")  # a new session
    assert "· beta" in browser.get("/dashboard/").content.decode()
    # Another user signing in with this browser does not inherit it.
    _, other_user = tenant_factory("alpha")  # first by name: where the other user starts
    membership_set(tenant=beta, user=other_user, role=Role.VIEWER)
    sign_out(browser, remembered)
    assert browser.login(username=other_user.username, password="pw-123456")
    assert "· beta" not in browser.get("/dashboard/").content.decode()
