"""Tenant scoping is enforced in the ORM (scheduler_app/tenant_scoping.py): walk every
tenant-owned model of the app registry (found by introspection, so a model added later is
walked too) and check that an unscoped query raises, a scoped one answers only its tenant's
rows, and the platform escape answers every tenant's. Then play the attacker through the API.
"""

# scoping-codemod: skip (its unscoped queries are the point)

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.db import models
from django.utils import timezone

from scheduler_app import selectors
from scheduler_app.models import TaskDefinition, TaskExecution, Tenant
from scheduler_app.tenant_scoping import UnscopedTenantQuery, _pins_tenant, is_tenant_owned
from tests.factories import make_task

pytestmark = pytest.mark.django_db

TENANT_OWNED = sorted(
    (model for model in apps.get_models() if is_tenant_owned(model)),
    key=lambda model: model._meta.label,
)


AUTO_KEYS = (models.AutoField, models.BigAutoField, models.SmallAutoField)


def _value_for(field: models.Field, tenant: Tenant, made: dict) -> Any:
    """A value a generic row can hold in `field` (unique where it must be)."""
    if field.choices:
        return field.choices[0][0]
    if isinstance(field, models.ForeignKey):
        if field.name == "tenant":
            return tenant
        return _row(field.related_model, tenant, made)
    if field.name == "tenant_id":  # a plain column, no foreign key (data_lifecycle)
        return tenant.pk
    if isinstance(field, models.UUIDField):
        return uuid.uuid4()
    if isinstance(field, models.DateTimeField):
        return timezone.now()
    if isinstance(field, models.DurationField):
        return timedelta(seconds=1)
    if isinstance(field, models.BooleanField):
        return False
    if isinstance(field, models.IntegerField | models.FloatField | models.DecimalField):
        return 1
    if isinstance(field, models.JSONField):
        return {}
    if isinstance(field, models.CharField | models.TextField | models.SlugField):
        return uuid.uuid4().hex[: min(getattr(field, "max_length", None) or 32, 32)]
    if isinstance(field, models.BinaryField):
        return b""
    raise AssertionError(
        f"no generic value for {field.model._meta.label}.{field.name}: add it here"
    )


def _row(model: type[models.Model], tenant: Tenant, made: dict) -> models.Model:
    """One row of `model` for `tenant`, its required fields filled generically, its parents
    made the same way (once per tenant and model)."""
    key = (model, tenant.pk)
    if key in made:
        return made[key]
    if model is TaskDefinition:
        row = make_task(tenant, name=f"walk-{uuid.uuid4().hex[:8]}")
    elif model is Tenant:
        return tenant
    else:
        values = {}
        for field in model._meta.concrete_fields:
            if field.primary_key and (field.has_default() or isinstance(field, AUTO_KEYS)):
                continue
            optional = field.has_default() or field.null or getattr(field, "auto_now_add", False)
            # The tenant is set even where it may be null (a platform incident has none).
            if optional and field.name != "tenant":
                continue
            values[field.name] = _value_for(field, tenant, made)
        if model is TaskExecution:
            values["scheduled_at"] = timezone.now()
        # A backfill is of a task or of a DAG (a check constraint): of a task here.
        if model._meta.label == "dags.Backfill":
            values["task"] = _row(TaskDefinition, tenant, made)
        row = model._base_manager.create(**values)
    made[key] = row
    return row


@pytest.fixture
def two_tenants(tenant_factory):
    alpha, _ = tenant_factory("walk-alpha")
    bravo, _ = tenant_factory("walk-bravo")
    return alpha, bravo


def test_every_tenant_owned_model_is_walked():
    """The introspection finds the models the ORM scoping was written for (and any new one)."""
    labels = {model._meta.label for model in TENANT_OWNED}
    assert {"scheduler_app.TaskDefinition", "scheduler_app.TaskExecution", "dags.DagRun"} <= labels
    assert len(labels) >= 20
    for model in TENANT_OWNED:
        assert model._meta.default_manager.name == "objects", model
        assert hasattr(model, "platform"), f"{model._meta.label} has no platform manager"


@pytest.mark.parametrize("model", TENANT_OWNED, ids=lambda model: model._meta.label)
def test_unscoped_query_refused_scoped_answers_its_tenant(model, two_tenants):
    alpha, bravo = two_tenants
    made: dict = {}
    mine = _row(model, alpha, made)
    theirs = _row(model, bravo, made)

    # Every way of reaching the database unscoped is refused, naming the model and the fix.
    unscoped = model.objects.filter(pk=theirs.pk)
    for evaluate in (
        list,
        len,
        bool,
        lambda qs: qs.count(),
        lambda qs: qs.exists(),
        lambda qs: qs.first(),
        lambda qs: qs.get(),
        lambda qs: list(qs.values_list("pk", flat=True)),
        lambda qs: qs.aggregate(n=models.Count("pk")),
        lambda qs: qs.in_bulk(),
        lambda qs: list(qs.iterator()),
        lambda qs: qs.update(),
        lambda qs: qs.delete(),
        lambda qs: model.platform.filter(pk__in=qs.values("pk")).count(),
        lambda qs: model.platform.filter(pk=mine.pk).union(qs),
    ):
        with pytest.raises(UnscopedTenantQuery, match=model.__name__):
            evaluate(unscoped)
    with pytest.raises(UnscopedTenantQuery, match="platform"):
        model.objects.get(pk=theirs.pk)
    # Naming no tenant is not a scope either.
    with pytest.raises(UnscopedTenantQuery):
        model.objects.filter(tenant_id__isnull=False).count()
    with pytest.raises(UnscopedTenantQuery):
        model.objects.exclude(tenant_id=alpha.pk).count()

    # Scoped: only that tenant's rows, however it is said.
    # (a tenant made by tenant_factory already has rows of some models: its admin's membership)
    mine_only = set(model._base_manager.filter(tenant_id=alpha.pk).values_list("pk", flat=True))
    assert mine.pk in mine_only and theirs.pk not in mine_only
    assert set(model.objects.filter(tenant_id=alpha.pk).values_list("pk", flat=True)) == mine_only
    assert set(model.objects.for_tenant(alpha).values_list("pk", flat=True)) == mine_only
    assert set(model.objects.for_tenant(alpha.id).values_list("pk", flat=True)) == mine_only
    assert not model.objects.filter(tenant_id=alpha.id, pk=theirs.pk).exists()
    assert model.objects.get(tenant_id=bravo.pk, pk=theirs.pk).pk == theirs.pk

    # The platform escape answers every tenant's rows.
    everyone = set(model.platform.filter(pk__in=[mine.pk, theirs.pk]).values_list("pk", flat=True))
    assert everyone == {mine.pk, theirs.pk}
    assert model.objects.platform_wide().filter(pk=theirs.pk).count() == 1
    both = model.objects.for_tenant_or_platform(None).filter(pk__in=[mine.pk, theirs.pk])
    assert set(both.values_list("pk", flat=True)) == everyone
    assert (
        set(model.objects.for_tenant_or_platform(alpha).values_list("pk", flat=True)) == mine_only
    )

    # Django's own machinery is untouched: refresh, save (the base manager).
    theirs.refresh_from_db()
    theirs.save()


def test_related_manager_of_a_loaded_parent_is_scoped(two_tenants):
    """`tenant.tasks` and `task.executions` filter by their parent, which was itself loaded
    through a scoped (or explicitly platform-wide) query."""
    alpha, bravo = two_tenants
    mine = make_task(alpha, name="mine")
    make_task(bravo, name="theirs")
    assert [task.pk for task in alpha.tasks.all()] == [mine.pk]
    assert list(Tenant.objects.get(pk=alpha.pk).tasks.values_list("name", flat=True)) == ["mine"]
    assert [t.pk for t in Tenant.objects.prefetch_related("tasks").get(pk=alpha.pk).tasks.all()]


def test_a_selector_that_forgot_its_filter_fails_loudly(two_tenants):
    """What the scoping is for: the query a selector would write without its tenant."""
    alpha, bravo = two_tenants
    make_task(bravo, name="bravo-private")
    with pytest.raises(UnscopedTenantQuery):
        list(TaskDefinition.objects.filter(deleted_at__isnull=True).order_by("name"))
    # An OR that mentions the tenant does not pin it.
    with pytest.raises(UnscopedTenantQuery):
        TaskDefinition.objects.filter(
            models.Q(tenant=alpha) | models.Q(name="bravo-private")
        ).count()


def test_another_tenants_execution_through_the_api_is_a_404(tenant_factory, api, tenant):
    """The attacker: tenant A asks for tenant B's execution, its log, its cancel and retry
    by id, through paths whose selectors read by id and would leak without their filter."""
    bravo, _ = tenant_factory("walk-bravo-api")
    task = make_task(bravo, name="bravo-secret-task", schedule={"type": "manual"})
    run = TaskExecution.platform.create(
        tenant=bravo,
        task=task,
        status="failed",
        trigger="manual",
        scheduled_at=timezone.now(),
        attempt=1,
        max_attempts=1,
        dead_lettered=True,
        error_message="bravo-private-error",
    )
    for method, path in (
        ("get", f"/api/v1/executions/{run.id}"),
        ("get", f"/api/v1/executions/{run.id}/logs"),
        ("post", f"/api/v1/executions/{run.id}/cancel"),
        ("post", f"/api/v1/executions/{run.id}/retry"),
        ("get", f"/api/v1/tasks/{task.id}"),
        ("get", f"/api/v1/tasks/{task.id}/executions"),
        ("post", f"/api/v1/admin/dlq/{run.id}/retry"),
    ):
        response = getattr(api, method)(path)
        assert response.status_code == 404, (path, response.status_code)
        assert b"bravo" not in response.content, path
    run.refresh_from_db()
    assert run.status == "failed" and run.dead_lettered


def test_the_check_costs_microseconds_not_a_query():
    """The price of the scoping per query: a flag set by filter() and tested on evaluation.
    Measured on querysets that are built and checked without touching the database."""
    rounds = 20_000
    kwargs = {"tenant_id": 1, "status": "running"}
    scoped = TaskExecution.objects.filter(**kwargs)
    start = time.perf_counter()
    for _ in range(rounds):
        # What the scoping adds to one query: the look at filter()'s terms, the test at
        # evaluation.
        _pins_tenant((), kwargs)
        scoped._require_scope()
    added = (time.perf_counter() - start) / rounds
    start = time.perf_counter()
    for _ in range(rounds // 10):
        TaskExecution._base_manager.filter(**kwargs)
    plain_filter = (time.perf_counter() - start) / (rounds // 10)
    print(
        f"scoping adds {added * 1e9:.0f} ns a query; "
        f"a plain filter() alone {plain_filter * 1e6:.1f} us"
    )
    # Well below building the queryset itself, let alone a database round trip (~100 us).
    assert added < 10e-6
    assert added < plain_filter


def test_a_selector_that_forgot_its_tenant_filter_fails_instead_of_leaking(
    monkeypatch, tenant_factory, api
):
    """The attacker again, with the bug the scoping is for planted: `execution_get` loses its
    tenant filter (a refactor gone wrong). Before the ORM scoping, tenant A's request for
    tenant B's execution answered 200 with B's run; now the query refuses to run."""

    bravo, _ = tenant_factory("walk-bravo-bug")
    task = make_task(bravo, name="bravo-bug-task", schedule={"type": "manual"})
    run = TaskExecution.platform.create(
        tenant=bravo,
        task=task,
        status="success",
        trigger="manual",
        scheduled_at=timezone.now(),
        attempt=1,
        max_attempts=1,
    )

    def execution_get_without_its_filter(*, tenant, execution_id):
        return TaskExecution.objects.select_related("task").filter(id=execution_id).first()

    monkeypatch.setattr(selectors, "execution_get", execution_get_without_its_filter)
    with pytest.raises(UnscopedTenantQuery):
        api.get(f"/api/v1/executions/{run.id}")
