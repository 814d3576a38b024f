"""Load the DAG files under dags/definitions/ (YAML or JSON) into the database.

A file names its tenant (`tenant: <slug>`, default: the DAG_FILES_TENANT setting). A file
that does not validate is reported and the DAG keeps its previous version. Files are read by
the one document loader (`budgets.documents`): at most DEFINITION_MAX_DOCUMENT_BYTES, and
YAML without aliases, anchors or merge keys.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from budgets.documents import DocumentError, document_size_check, yaml_load
from dags.models import Dag
from dags.services.definitions import dag_create, dag_update
from scheduler_app.errors import DomainError
from scheduler_app.models import Tenant


def _load(path: Path) -> object:
    max_bytes = settings.DEFINITION_MAX_DOCUMENT_BYTES
    # The size first, from the file system: a huge file is not read into memory at all.
    if path.stat().st_size > max_bytes:
        raise DocumentError(f"the file is {path.stat().st_size} bytes; at most {max_bytes}")
    text = path.read_text()
    if path.suffix == ".json":
        document_size_check(text, max_bytes=max_bytes)
        return json.loads(text)
    return yaml_load(text, max_bytes=max_bytes)


class Command(BaseCommand):
    help = "Create or update DAGs from the YAML/JSON files in dags/definitions/."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--dir", default=str(settings.DAG_FILES_DIR))

    def handle(self, *args, **options) -> None:
        directory = Path(options["dir"])
        files = sorted(p for p in directory.glob("*") if p.suffix in (".yaml", ".yml", ".json"))
        failed = 0
        for path in files:
            try:
                raw = _load(path)
            except ValueError as error:  # DocumentError and JSONDecodeError are ValueErrors
                self.stderr.write(f"{path.name}: cannot parse: {error}")
                failed += 1
                continue
            raw = dict(raw) if isinstance(raw, dict) else raw
            slug = raw.pop("tenant", settings.DAG_FILES_TENANT) if isinstance(raw, dict) else None
            tenant = Tenant.objects.filter(slug=slug).first()
            if tenant is None:
                self.stderr.write(f"{path.name}: no tenant {slug!r}; skipped")
                failed += 1
                continue
            name = raw.get("dag", raw.get("name")) if isinstance(raw, dict) else None
            existing = Dag.objects.filter(tenant=tenant, name=name, deleted_at__isnull=True).first()
            try:
                if existing is None:
                    dag = dag_create(tenant=tenant, raw=raw, source=f"file:{path.name}")
                    self.stdout.write(f"{path.name}: created {dag.name} v{dag.version}")
                else:
                    before = existing.version
                    dag = dag_update(dag=existing, raw=raw)
                    change = "unchanged" if dag.version == before else f"now v{dag.version}"
                    self.stdout.write(f"{path.name}: {dag.name} {change}")
            except DomainError as error:
                where = f" ({error.field})" if error.field else ""
                self.stderr.write(
                    f"{path.name}: invalid{where}: {error.message}; previous version kept"
                )
                failed += 1
        self.stdout.write(f"synced {len(files) - failed} of {len(files)} DAG file(s)")
