"""Webhook signing secrets rest encrypted (SECRETS_KEY), never travel on the broker, are
write-only in the admin, and still sign what a local HTTP receiver gets. The data migration
encrypts rows written before it."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from alerting.models import NotificationChannel
from alerting.services.channels import (
    channel_signing_secret,
    channel_signing_secret_set,
    notification_channel_create,
)
from alerting.services.delivery import SIGNATURE_HEADER
from alerting.services.signing import signature_verify
from project.celery import app
from tests.alerting.test_notifications import run_once
from tests.factories import make_task

PLAINTEXT = "whsec-plain-4b1d"


def stored_row(channel_id) -> str:
    """The channel's whole database row as PostgreSQL stores it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT row_to_json(c)::text FROM scheduler_app_notificationchannel c WHERE id = %s",
            [channel_id],
        )
        return cursor.fetchone()[0]


def run_queued(queue: str, *, must_not_contain: str) -> int:
    """Run the Celery messages in `queue` as a worker would, checking each raw body first."""
    ran = 0
    with app.connection_for_read() as conn:
        simple = conn.SimpleQueue(queue)
        try:
            while True:
                try:
                    message = simple.get(timeout=0.5)
                except simple.Empty:
                    return ran
                assert must_not_contain not in str(message.body)
                args, kwargs, _embed = message.payload
                app.tasks[message.headers["task"]](*args, **kwargs)
                message.ack()
                ran += 1
        finally:
            simple.close()


@pytest.mark.django_db
def test_secret_rests_encrypted_stays_off_the_broker_and_signs_the_webhook(
    tenant,
    receiver,
    notify_settings,
    django_capture_on_commit_callbacks,
):
    channel = notification_channel_create(
        tenant=tenant,
        name="hook",
        kind="webhook",
        target=receiver.url + "/hook",
        signing_secret=PLAINTEXT,
    )
    row = stored_row(channel.id)
    assert PLAINTEXT not in row and channel.signing_secret_ciphertext in row
    assert channel_signing_secret(channel_id=channel.id) == PLAINTEXT

    task = make_task(tenant, name="flaky", notifications={"on_failure": ["hook"]})
    run_once(task, "failed", django_capture_on_commit_callbacks, transient=True)
    assert run_queued(notify_settings, must_not_contain=PLAINTEXT) >= 2  # notify + deliver
    [request] = receiver.requests
    assert signature_verify(PLAINTEXT, request["body"], request["headers"][SIGNATURE_HEADER])

    # Rotating the secret: the next delivery is signed with the new one.
    channel_signing_secret_set(channel=channel, signing_secret="rotated-secret")
    assert "rotated-secret" not in stored_row(channel.id)
    run_once(task, "success", django_capture_on_commit_callbacks)  # resolves the incident
    run_queued(notify_settings, must_not_contain="rotated-secret")
    resolved = receiver.requests[-1]
    header = resolved["headers"][SIGNATURE_HEADER]
    assert signature_verify("rotated-secret", resolved["body"], header)
    assert not signature_verify(PLAINTEXT, resolved["body"], header)


@pytest.mark.django_db
def test_admin_takes_a_new_secret_but_never_shows_one(tenant, admin_user):
    channel = notification_channel_create(
        tenant=tenant,
        name="hook",
        kind="webhook",
        target="https://example.com/h",
        signing_secret=PLAINTEXT,
    )
    client = Client()
    client.force_login(admin_user)
    url = f"/admin/alerting/notificationchannel/{channel.id}/change/"
    page = client.get(url).content.decode()
    assert 'name="signing_secret"' in page
    assert PLAINTEXT not in page and channel.signing_secret_ciphertext not in page
    listing = client.get("/admin/alerting/notificationchannel/").content.decode()
    assert PLAINTEXT not in listing and channel.signing_secret_ciphertext not in listing
    form = {
        "tenant": str(tenant.id),
        "name": "hook",
        "kind": "webhook",
        "target": "https://example.com/h",
        "alerts": "on",
        "signing_secret": "",
    }
    assert client.post(url, form).status_code == 302  # blank: the secret is kept
    assert channel_signing_secret(channel_id=channel.id) == PLAINTEXT
    assert client.post(url, {**form, "signing_secret": "from-admin"}).status_code == 302
    assert channel_signing_secret(channel_id=channel.id) == "from-admin"
    assert "from-admin" not in stored_row(channel.id)
    assert client.post(url, {**form, "clear_signing_secret": "on"}).status_code == 302
    assert channel_signing_secret(channel_id=channel.id) == ""


@pytest.mark.django_db(transaction=True)
def test_migration_encrypts_existing_plaintext_secrets(tenant):
    before = [("scheduler_app", "0006_scheduling_policies")]
    after = [("scheduler_app", "0007_channel_signing_secret_encrypted")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        old_apps = executor.loader.project_state(before).apps
        old_model = old_apps.get_model("scheduler_app", "NotificationChannel")
        old = old_model.objects.create(
            tenant_id=tenant.id,
            name="legacy",
            kind="webhook",
            target="https://x/h",
            signing_secret=PLAINTEXT,
        )
        unsigned = old_model.objects.create(
            tenant_id=tenant.id, name="plain", kind="slack", target="https://x/s"
        )
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(after)
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert PLAINTEXT not in stored_row(old.id)
    assert channel_signing_secret(channel_id=old.id) == PLAINTEXT
    assert NotificationChannel.platform.get(id=unsigned.id).signing_secret_ciphertext == ""
