from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from django.views.generic import RedirectView

from scheduler_app.monitoring.views import metrics_view, readyz_view


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("", RedirectView.as_view(url="/dashboard/", permanent=False)),
    path("admin/", admin.site.urls),
    path("api/v1/", include("scheduler_app.api.urls")),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz_view, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path("dashboard/", include("scheduler_app.dashboard.urls")),
]
