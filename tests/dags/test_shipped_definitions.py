"""The DAG files `make run` loads (dags/definitions/) are valid, the design document's
handlers included, and do not take the name the manual's tour posts (docs/getting-started.md)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from dags.models import Dag

pytestmark = pytest.mark.django_db


def test_every_shipped_definition_syncs(tenant_factory, settings):
    tenant, _ = tenant_factory("demo")
    settings.DAG_FILES_TENANT = "demo"
    out, err = StringIO(), StringIO()
    call_command("sync_dags", stdout=out, stderr=err)
    assert err.getvalue() == "", err.getvalue()
    names = set(Dag.platform.filter(tenant=tenant).values_list("name", flat=True))
    assert "document-archive" in names
    assert "document-processing" not in names  # the tour creates that one through the API
