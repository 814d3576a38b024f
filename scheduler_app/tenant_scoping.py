"""Tenant scoping enforced in the ORM: a query of tenant data states whose data it reads.

Every model with a `tenant` foreign key (or a plain `tenant_id` column) declares

    objects = TenantScopedManager()     # the default manager: refuses an unscoped query
    platform = PlatformManager()        # the explicit, greppable escape for platform code

`Model.objects` answers only once the query is scoped: filtered by its tenant
(`filter(tenant=...)`, `tenant_id=...`, `tenant__in=...`, `get(tenant=..., id=...)`),
narrowed by `.for_tenant(tenant)`, or reached through a related manager of an object that
was itself loaded (`tenant.tasks.all()`, `dag.runs.filter(...)`: Django's reverse managers
filter by the parent, and the parent came from a scoped or explicitly platform-wide query).
Evaluating it otherwise (iteration, `len`, `count`, `exists`, `get`, `first`, `aggregate`,
`update`, `delete`, `in_bulk`, `values`, use as a subquery) raises `UnscopedTenantQuery`, so
a selector that forgets its tenant filter fails in the tests instead of leaking.

Platform code (the beat, the workers, housekeeping, the superuser's admin, an execution
looked up by the id its doorbell carried) reads across tenants on purpose and says so:
`Model.platform.filter(...)`, or `Model.objects.platform_wide()`. A primary key alone is not
a scope: the worker's claim by id is platform code and is written as such.

Writes that read nothing (`create`, `bulk_create`) need no scope. Django's own machinery
does not go through `objects`: `save()`, `refresh_from_db()`, cascades and forward foreign
keys use `_base_manager` (a plain manager), migrations get no custom manager
(`use_in_migrations` is false). The check costs a flag test per evaluation and a look at
the filter's keyword names per `filter()` (bench: tests/scheduler_app/test_tenant_scoping.py
measures it).
"""

from __future__ import annotations

from typing import Any, Self

from django.core.exceptions import FieldDoesNotExist
from django.db import models
from django.db.models import Q

# The scopes a queryset can be in: None (unscoped), or why it may answer.
SCOPE_TENANT = "tenant"
SCOPE_PARENT = "parent"
SCOPE_PLATFORM = "platform"


class UnscopedTenantQuery(RuntimeError):
    """A query of tenant-owned rows was evaluated without saying whose rows it reads."""

    def __init__(self, model: type[models.Model]) -> None:
        name = model.__name__
        super().__init__(
            f"Unscoped query of tenant-owned {model._meta.label}: filter it by its tenant "
            f"({name}.objects.filter(tenant=...) or {name}.objects.for_tenant(tenant)), "
            f"or, in platform code that reads every tenant's rows on purpose, say so with "
            f"{name}.platform.filter(...) (see scheduler_app/tenant_scoping.py)."
        )


# The lookups after `tenant` / `tenant_id` that name one tenant (or a few, or none: a
# platform-level row with no tenant). `tenant__is_active=True` names no tenant, nor does
# `tenant__isnull=False`.
_PINNING_LOOKUPS = frozenset(
    ("", "exact", "in", "id", "pk", "id__in", "pk__in", "id__exact", "slug", "slug__in")
)


def _names_tenant(key: str, value: object) -> bool:
    """A filter keyword that pins the tenant: `tenant=`, `tenant_id__in=`, `tenant__slug=`,
    `tenant=None`, `tenant__isnull=True`."""
    head, _, rest = key.partition("__")
    if head not in ("tenant", "tenant_id"):
        return False
    if rest == "isnull":
        return bool(value)
    return rest in _PINNING_LOOKUPS


def _q_names_tenant(q: Q) -> bool:
    """An AND-ed, not negated Q whose direct terms pin the tenant (an OR does not)."""
    if q.negated or q.connector != Q.AND:
        return False
    for child in q.children:
        if isinstance(child, Q):
            if _q_names_tenant(child):
                return True
        elif isinstance(child, tuple) and _names_tenant(child[0], child[1]):
            return True
    return False


def _pins_tenant(args: Any, kwargs: Any) -> bool:
    """A `filter()` call's terms pin the tenant."""
    return any(_names_tenant(key, value) for key, value in kwargs.items()) or any(
        isinstance(arg, Q) and _q_names_tenant(arg) for arg in args
    )


class TenantScopedQuerySet(models.QuerySet):
    """A queryset that knows whether it was scoped, and refuses to answer until it is."""

    _tenant_scope: str | None = None

    # --- how a queryset becomes scoped -------------------------------------------------

    def for_tenant(self, tenant: object) -> Self:
        """The rows of one tenant (a Tenant or its id)."""
        return self.filter(tenant_id=tenant.pk if isinstance(tenant, models.Model) else tenant)

    def for_tenant_or_platform(self, tenant: object | None) -> Self:
        """One tenant's rows, or (None) every tenant's: for the selectors whose platform-staff
        caller passes no tenant (the view decided who may ask)."""
        return self.platform_wide() if tenant is None else self.for_tenant(tenant)

    def platform_wide(self) -> Self:
        """Every tenant's rows, on purpose: platform code only (beat, workers, housekeeping,
        the superuser's admin). Grep for `platform_wide(` and `.platform.` to audit them."""
        clone = self._chain()
        clone._tenant_scope = SCOPE_PLATFORM
        return clone

    def _filter_or_exclude(self, negate: bool, args: Any, kwargs: Any) -> Self:
        clone = super()._filter_or_exclude(negate, args, kwargs)
        if clone._tenant_scope is None and not negate and _pins_tenant(args, kwargs):
            clone._tenant_scope = SCOPE_TENANT
        return clone

    def _clone(self) -> Self:
        clone = super()._clone()
        clone._tenant_scope = self._tenant_scope
        return clone

    # --- the check, at every point a query reaches the database ------------------------

    def _require_scope(self) -> None:
        if self._tenant_scope is not None:
            return
        # A related manager's queryset (`tenant.tasks`, `dag.runs`, a prefetch) carries the
        # parent instance as a routing hint and is filtered by it.
        if "instance" in self._hints:
            self._tenant_scope = SCOPE_PARENT
            return
        raise UnscopedTenantQuery(self.model)

    def _fetch_all(self) -> None:
        if self._result_cache is None:
            self._require_scope()
        super()._fetch_all()

    def iterator(self, chunk_size: int | None = None) -> Any:
        self._require_scope()
        return super().iterator(chunk_size=chunk_size)

    def count(self) -> int:
        if self._result_cache is None:
            self._require_scope()
        return super().count()

    def exists(self) -> bool:
        if self._result_cache is None:
            self._require_scope()
        return super().exists()

    def aggregate(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self._require_scope()
        return super().aggregate(*args, **kwargs)

    def update(self, **kwargs: Any) -> int:
        self._require_scope()
        return super().update(**kwargs)

    def _update(self, values: Any) -> Any:
        self._require_scope()
        return super()._update(values)

    def delete(self) -> tuple[int, dict[str, int]]:
        self._require_scope()
        return super().delete()

    def in_bulk(self, id_list: Any = None, *, field_name: str = "pk") -> dict[Any, Any]:
        self._require_scope()
        return super().in_bulk(id_list, field_name=field_name)

    def contains(self, obj: models.Model) -> bool:
        if self._result_cache is None:
            self._require_scope()
        return super().contains(obj)

    def explain(self, *, format: str | None = None, **options: Any) -> str:
        self._require_scope()
        return super().explain(format=format, **options)

    def _combinator_query(self, combinator: str, *other_qs: Any, all: bool = False) -> Self:
        # union / intersection / difference: the other querysets answer with this one.
        for other in other_qs:
            if isinstance(other, TenantScopedQuerySet):
                other._require_scope()
        return super()._combinator_query(combinator, *other_qs, all=all)

    def resolve_expression(self, *args: Any, **kwargs: Any) -> Any:
        # Used as a subquery (`id__in=Model.objects.filter(...).values("id")`).
        self._require_scope()
        return super().resolve_expression(*args, **kwargs)


class TenantScopedManager(models.Manager.from_queryset(TenantScopedQuerySet)):  # type: ignore[misc]
    """The default manager of a tenant-owned model: its querysets must be scoped."""

    use_in_migrations = False


class PlatformManager(models.Manager.from_queryset(TenantScopedQuerySet)):  # type: ignore[misc]
    """`Model.platform`: every tenant's rows, for platform code that means it."""

    use_in_migrations = False

    def get_queryset(self) -> TenantScopedQuerySet:
        return super().get_queryset().platform_wide()


def is_tenant_owned(model: type[models.Model]) -> bool:
    """A model is tenant-owned when it has a `tenant` foreign key, or a plain `tenant_id`
    column (the data lifecycle's statistics and restored rows, which keep no foreign key).
    The walk test and the codemod find them this way, so a new model is covered without a
    list to keep."""
    try:
        field = model._meta.get_field("tenant")
    except FieldDoesNotExist:
        try:
            field = model._meta.get_field("tenant_id")
        except FieldDoesNotExist:
            return False
        return field.concrete and not field.is_relation
    return bool(getattr(field, "many_to_one", False))
