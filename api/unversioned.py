"""`/api/<path>` without a version: a 404 that names the versioned URL.

The design document's integration test calls `/api/tasks`, while its API lists every route
under `/api/v1/`. We keep one surface, versioned: an unversioned alias would be a second API
to keep compatible forever and would silently change meaning when a `/api/v2/` comes. The
404 says where the resource is, so the mistake costs one read.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import Resolver404, resolve


def unversioned_api(request: HttpRequest, rest: str) -> JsonResponse:
    versioned = f"/api/v1/{rest}"
    try:
        found = resolve(versioned).url_name != "api-unversioned" and not rest.startswith("v1/")
    except Resolver404:
        found = False
    if not found:
        return JsonResponse(
            {"code": "not_found", "message": "not found; the API is under /api/v1/"}, status=404
        )
    return JsonResponse(
        {
            "code": "not_found",
            "message": f"the API is versioned: use {versioned}",
            "location": versioned,
        },
        status=404,
    )
