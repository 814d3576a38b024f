from django.contrib import admin
from django.http import HttpRequest, HttpResponseRedirect, JsonResponse
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.permissions import AllowAny

from api.root import ApiRootView
from api.unversioned import unversioned_api
from scheduler_app.monitoring.views import metrics_view, readyz_view, scheduler_readyz_view


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """Browsers ask every site for /favicon.ico: the dashboard's icon (hashed static name)."""
    return HttpResponseRedirect(static("dashboard/favicon.svg"))


urlpatterns = [
    path("", RedirectView.as_view(url="/dashboard/", permanent=False)),
    path("admin/", admin.site.urls),
    path("api/v1/", ApiRootView.as_view(), name="api-root"),
    path("api/v1/", include("api.urls")),
    path("api/v1/", include("api.dags.urls")),
    path("healthz", healthz, name="healthz"),
    path("favicon.ico", favicon, name="favicon"),
    # The schema and its UI are public (they describe, they do not reveal tenant data);
    # the Swagger assets are vendored (drf-spectacular-sidecar), no internet needed.
    path(
        "api/schema/",
        SpectacularAPIView.as_view(permission_classes=[AllowAny], throttle_classes=[]),
        name="schema",
    ),
    # The split view: its start-up script is a file (?script), not inline, for the CSP.
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(
            url_name="schema",
            template_name="api/swagger_ui.html",
            permission_classes=[AllowAny],
            throttle_classes=[],
        ),
        name="swagger-ui",
    ),
    # Typed without the slash, the schema and its UI are still found (the unversioned
    # catch-all below would answer 404, and CommonMiddleware only appends a slash to a
    # path nothing matches).
    path("api/schema", RedirectView.as_view(pattern_name="schema", query_string=True)),
    path("api/docs", RedirectView.as_view(pattern_name="swagger-ui", query_string=True)),
    # Last of the api/ routes: what is left is an unversioned path (`/api/tasks`).
    path("api/<path:rest>", unversioned_api, name="api-unversioned"),
    path("readyz", readyz_view, name="readyz"),
    path("readyz/scheduler", scheduler_readyz_view, name="readyz-scheduler"),
    path("metrics", metrics_view, name="metrics"),
    path("dashboard/", include("dashboard.urls")),
]
