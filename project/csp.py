"""A Content-Security-Policy on every response: the dashboard, the admin, the API's Swagger UI.

What a page may load and run comes from this server only: scripts and stylesheets from its
own static files (no inline script, no inline <style>, no eval), images and fonts also as
data: URIs (Swagger UI's and the admin's icons), fetches and EventSource streams to itself,
forms posted to itself, never framed. A tenant's text that slipped through escaping could
then still not run. Style attributes stay allowed (`style-src-attr`): the DAG run's Gantt
bars are positioned with them; they cannot run code. Flower is a link to another origin,
which a policy does not restrict.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from django.conf import settings
from django.http import HttpRequest, HttpResponse

HEADER = "Content-Security-Policy"


def policy_header(directives: Mapping[str, tuple[str, ...]]) -> str:
    return "; ".join(f"{name} {' '.join(sources)}".strip() for name, sources in directives.items())


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.header = policy_header(settings.CONTENT_SECURITY_POLICY)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if self.header and HEADER not in response:
            response[HEADER] = self.header
        return response
