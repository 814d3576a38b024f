"""The dashboard's role rules are the API's: each page that writes, and each button, names the
API view and method it stands for, and the API's own rule (its `write_role` / `read_role`,
read by api.permissions) decides. A second table of roles here drifted: the
dashboard let an operator dismiss a dead letter the API keeps for admins.

    @login_required
    @follows_api(actions={"retry": ApiRule(DeadLetterRetryView, "POST"),
                          "delete": ApiRule(DeadLetterDetailView, "DELETE")})
    def dead_letter_action(request, execution_id, action): ...

A refusal is a 403 before the view runs (so nothing is looked up or written); an action the
view does not name is a 404; a method it does not name a 405. `view.api_rules` holds the
rules, which tests/dashboard/test_roles_follow_the_api.py walks for every dashboard route.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import wraps
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.urls import URLPattern, URLResolver, get_resolver

from api.permissions import required_role, role_allows
from dashboard.tenancy import dashboard_membership


@dataclass(frozen=True)
class ApiRule:
    """The API view and method a dashboard page or button stands for."""

    view: type
    method: str

    @property
    def role(self) -> str:
        if getattr(self.view, "platform_staff_only", False) or getattr(
            self.view, "token_scoped", False
        ):
            raise ValueError(f"{self.view.__name__} is not a tenant member's endpoint")
        return required_role(self.view, self.method)


@dataclass(frozen=True)
class ApiRules:
    """By HTTP method (a page: its GET and its form's POST), or by the `action` the URL names
    (a button route: POST only)."""

    methods: Mapping[str, ApiRule]
    actions: Mapping[str, ApiRule]

    def rule_for(self, request: HttpRequest, kwargs: Mapping[str, Any]) -> ApiRule | None:
        if self.actions:
            return self.actions.get(str(kwargs.get("action")))
        return self.methods.get(request.method or "GET")

    @property
    def allowed_methods(self) -> list[str]:
        return ["POST"] if self.actions else list(self.methods)


def follows_api(
    *,
    actions: Mapping[str, ApiRule] | None = None,
    **methods: ApiRule,
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Guard a dashboard view with the API's rules; put it under @login_required."""
    if bool(actions) == bool(methods):
        raise ValueError("give either actions or methods")
    rules = ApiRules(methods=dict(methods), actions=dict(actions or {}))

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in rules.allowed_methods:
                return HttpResponseNotAllowed(rules.allowed_methods)
            rule = rules.rule_for(request, kwargs)
            if rule is None:
                raise Http404("unknown action")
            role = dashboard_membership(request).role
            if not role_allows(role, rule.role):
                raise PermissionDenied(
                    f"your role in this tenant ({role}) does not allow this; "
                    f"it needs {rule.role}, as in the API"
                )
            return view(request, *args, **kwargs)

        guarded.api_rules = rules  # type: ignore[attr-defined]
        return guarded

    return decorate


@dataclass(frozen=True)
class DashboardRoute:
    path: str  # "/dashboard/dlq/<str:execution_id>/<str:action>"
    name: str
    view: Callable[..., HttpResponse]
    params: tuple[str, ...]

    @property
    def rules(self) -> ApiRules | None:
        return getattr(self.view, "api_rules", None)


def dashboard_routes() -> list[DashboardRoute]:
    """Every route of the dashboard's URLconf (the "dashboard" namespace of the project's
    URLconf, and what it includes), read from the resolver so a route added later is in
    it, and without importing dashboard.urls (its views import this module)."""
    namespace = get_resolver().namespace_dict["dashboard"][1]
    found: list[DashboardRoute] = []

    def walk(patterns, prefix: str) -> None:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, prefix + str(entry.pattern))
            elif isinstance(entry, URLPattern):
                route = prefix + str(entry.pattern)
                params = tuple(entry.pattern.converters)
                found.append(DashboardRoute(route, entry.name or "", entry.callback, params))

    walk(namespace.url_patterns, "/dashboard/")
    return found


def route_allows(role: str, route_and_key: str) -> bool:
    """`"dlq-action.delete"` (a route and its action) or `"task-new.POST"` (a route and a
    method): whether `role` may, by the route's API rule. For the templates' buttons."""
    name, _, key = route_and_key.partition(".")
    rules = _rules_by_route_name().get(name)
    if rules is None:
        raise ValueError(f"dashboard route {name!r} names no API rules")
    rule = rules.actions.get(key) if rules.actions else rules.methods.get(key)
    if rule is None:
        raise ValueError(f"dashboard route {name!r} has no rule {key!r}")
    return role_allows(role, rule.role)


_RULES_BY_NAME: dict[str, ApiRules] = {}


def _rules_by_route_name() -> dict[str, ApiRules]:
    if not _RULES_BY_NAME:
        _RULES_BY_NAME.update(
            {route.name: route.rules for route in dashboard_routes() if route.rules is not None}
        )
    return _RULES_BY_NAME
