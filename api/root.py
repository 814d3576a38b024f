"""GET /api/v1/: the API's front door, a list of its endpoints (links) and where the
interactive documentation is. Public, like the schema: it describes, it reveals nothing."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

PREFIX = "api/v1/"


def _collection_routes() -> dict[str, str]:
    """{route name: path} of every /api/v1/ route that takes no id, in urlconf order."""
    routes: dict[str, str] = {}
    for entry in get_resolver().url_patterns:
        if not (isinstance(entry, URLResolver) and str(entry.pattern) == PREFIX):
            continue
        for pattern in entry.url_patterns:
            route = str(pattern.pattern)
            if isinstance(pattern, URLPattern) and pattern.name and route and "<" not in route:
                routes[pattern.name] = f"/{PREFIX}{route}"
    return routes


class ApiRootView(APIView):
    permission_classes = [AllowAny]
    authentication_classes: list = []
    throttle_classes: list = []

    @extend_schema(exclude=True)
    def get(self, request: Request) -> Response:
        return Response(
            {
                "docs": request.build_absolute_uri("/api/docs/"),
                "schema": request.build_absolute_uri("/api/schema/"),
                "authentication": "POST auth/token with a username and password for a JWT, "
                "or send an API key; see the docs",
                "endpoints": {
                    name: request.build_absolute_uri(path)
                    for name, path in _collection_routes().items()
                },
            }
        )
