"""The signed one-time links of an approval's announcement, played through the dashboard as
people would: the link of each approver, opened signed in; a link used twice, tampered,
opened by someone else or after the wait ended is refused and decides nothing. And two
approvers deciding at once release the node once."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client

from alerting.services.approval_notices import approval_announcement
from dags.approval_models import ApprovalDecision, ApprovalWait
from dags.models import DagNodeExecution, DagNodeState
from dags.services.approvals import approval_decide, approval_waits_expire
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from scheduler_app.errors import Conflict
from scheduler_app.models import AuditEntry
from tests.dags.approval_helpers import member, release_dag

PASSWORD = "pw-123456"


def _client(user) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def _people(tenant):
    return {
        name: member(tenant, name, role)
        for name, role in (("alice", "operator"), ("bob", "operator"), ("carol", "admin"))
    }


def _waiting(tenant, triggered_by: str, **dag):
    run = dag_trigger(
        dag=dag_create(tenant=tenant, raw={**release_dag(), **dag}), triggered_by=triggered_by
    )
    return run, ApprovalWait.platform.select_related("run", "run__dag").get(run=run)


def _link_path(url: str) -> str:
    return url[url.index("/dashboard/") :]


@pytest.mark.django_db
def test_the_announcement_links_work_once_for_the_approver_they_name(tenant):
    people = _people(tenant)
    run, wait = _waiting(tenant, "user:carol", owner="user:carol")
    sends, problems = approval_announcement(wait)
    assert problems == []
    by_receiver = {target.target: message for target, message in sends}
    # The owner's mail has a link for each who may decide (not carol: she triggered the
    # run); each approver's own mail has only theirs.
    assert set(by_receiver) == {"carol@example.com", "alice@example.com", "bob@example.com"}
    assert set(by_receiver["carol@example.com"]["links"]) == {"acme-admin", "alice", "bob"}
    assert set(by_receiver["alice@example.com"]["links"]) == {"alice"}
    assert "Ship the release?" in by_receiver["alice@example.com"]["text"]
    link = _link_path(by_receiver["alice@example.com"]["links"]["alice"])

    # Forwarded to bob, alice's link decides nothing for him.
    as_bob = _client(people["bob"]).post(link, {"verdict": "approve"})
    assert as_bob.status_code == 403 and b"another approver" in as_bob.content
    # Opening it (a mail scanner's fetch, a chat preview) decides nothing either.
    alice = _client(people["alice"])
    shown = alice.get(link)
    assert shown.status_code == 200 and b"btn-link-approve" in shown.content
    assert not ApprovalDecision.objects.exists()

    used = alice.post(link, {"verdict": "approve", "comment": "from my phone"})
    assert used.status_code == 200 and b"approval-decided" in used.content
    decision = ApprovalDecision.objects.get()
    assert (decision.username, decision.via, decision.comment) == ("alice", "link", "from my phone")
    entry = AuditEntry.platform.get(action="approval.approve")
    assert entry.actor == "user:alice" and entry.detail["via"] == "link"

    # Reused: refused, by its own approver too, and nothing more is counted.
    for again in (alice.post(link, {"verdict": "reject"}), alice.get(link)):
        assert again.status_code == 410 and b"already used" in again.content
    assert ApprovalDecision.objects.count() == 1
    assert DagNodeState.objects.get(run=run, node_id="sign-off").status == "waiting_for_approval"

    # Tampered: one character of the signature changed.
    token = link.rsplit("/", 1)[1]
    bobs = _link_path(by_receiver["bob@example.com"]["links"]["bob"])
    forged = bobs[:-1] + ("A" if bobs[-1] != "A" else "B")
    bob = _client(people["bob"])
    refused = bob.post(forged, {"verdict": "approve"})
    assert refused.status_code == 404 and b"not valid" in refused.content
    # Nor can alice's payload be re-signed for bob: her token under his name is not valid.
    swapped = bob.post(
        bobs.rsplit("/", 1)[0] + "/" + token.split(":")[0] + ":" + bobs.split(":")[-1]
    )
    assert swapped.status_code in (403, 404)
    assert ApprovalDecision.objects.count() == 1

    # bob's own link, untouched, releases the node (the second approval).
    released = bob.post(bobs, {"verdict": "approve"})
    assert released.status_code == 200
    assert DagNodeState.objects.get(run=run, node_id="sign-off").status == "success"


@pytest.mark.django_db
def test_a_link_expires_with_its_wait(tenant):
    people = _people(tenant)
    run, wait = _waiting(tenant, "user:carol", owner="user:carol")
    sends, _ = approval_announcement(wait)
    link = _link_path(
        next(m for t, m in sends if t.target == "alice@example.com")["links"]["alice"]
    )
    assert approval_waits_expire(now=wait.deadline + timedelta(seconds=1)) == 1
    late = _client(people["alice"]).post(link, {"verdict": "approve"})
    assert late.status_code == 410 and b"no longer open" in late.content
    assert not ApprovalDecision.objects.exists()
    assert DagNodeState.objects.get(run=run, node_id="sign-off").status == "failed"


@pytest.mark.django_db
def test_the_run_page_shows_the_buttons_only_to_who_may_decide(tenant):
    people = _people(tenant)
    viewer = member(tenant, "vera", "viewer")
    run, _wait = _waiting(tenant, "user:carol")
    page = f"/dashboard/dags/{run.dag_id}/runs/{run.id}"
    html = _client(people["alice"]).get(page).content.decode()
    assert 'id="btn-approve-sign-off"' in html and 'data-approval-status="waiting"' in html
    assert 'data-tone="approval"' in html and "left</text>" in html  # colour and time left
    own = _client(people["carol"]).get(page).content.decode()
    assert 'id="btn-approve-sign-off"' not in own and "you triggered this run" in own
    assert 'id="btn-approve-sign-off"' not in _client(viewer).get(page).content.decode()
    # The viewer's POST is refused before anything is looked up (the API's role rule).
    action = f"{page}/nodes/sign-off/approve"
    assert _client(viewer).post(action, {"comment": "me too"}).status_code == 403
    assert not ApprovalDecision.objects.exists()
    done = _client(people["alice"]).post(action, {"comment": "looks right"}, follow=True)
    assert done.status_code == 200 and "Approved sign-off" in done.content.decode()
    assert ApprovalDecision.objects.get().via == "dashboard"


@pytest.mark.django_db
def test_the_triggerers_forged_post_decides_nothing_and_a_rejection_on_the_run_page_fails_it(
    tenant,
):
    """The attacker: the run's triggerer, shown no buttons, posts the approve form anyway.
    Nothing is counted. Then an operator rejects on the run page with a reason: the node
    fails with it, and the decision is audited as the dashboard's."""
    people = _people(tenant)
    run, _wait = _waiting(tenant, "user:carol")
    page = f"/dashboard/dags/{run.dag_id}/runs/{run.id}"
    carol = _client(people["carol"])
    forged = carol.post(f"{page}/nodes/sign-off/approve", {"comment": "mine"}, follow=True)
    assert forged.status_code == 200 and "you triggered this run" in forged.content.decode()
    assert not ApprovalDecision.objects.exists()
    assert not AuditEntry.platform.filter(action__startswith="approval.").exists()

    bob = _client(people["bob"])
    done = bob.post(f"{page}/nodes/sign-off/reject", {"comment": "wrong tag"}, follow=True)
    assert done.status_code == 200 and "Rejected sign-off" in done.content.decode()
    node = DagNodeState.objects.get(run=run, node_id="sign-off")
    assert (node.status, node.error_message) == ("failed", "rejected by bob: wrong tag")
    assert DagNodeState.objects.get(run=run, node_id="ship").status == "upstream_failed"
    entry = AuditEntry.platform.get(action="approval.reject")
    assert (entry.actor, entry.detail["via"], entry.detail["comment"]) == (
        "user:bob",
        "dashboard",
        "wrong tag",
    )


@pytest.mark.django_db(transaction=True)
def test_concurrent_approvals_reaching_the_quorum_release_the_node_once(tenant):
    people = _people(tenant)
    run, wait = _waiting(tenant, "user:acme-admin")
    barrier = threading.Barrier(3)
    outcomes: list[object] = []

    def approve(user) -> None:
        try:
            barrier.wait(timeout=10)
            outcomes.append(
                approval_decide(wait_id=wait.id, user=user, verdict="approve", via="api")
            )
        except Conflict as error:
            outcomes.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=approve, args=(user,)) for user in people.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    decided = [o for o in outcomes if not isinstance(o, Conflict)]
    assert len(outcomes) == 3
    # Two approvals count (the quorum); the third found the node released.
    assert len(decided) == 2 and sum(o.released for o in decided) == 1
    assert [type(o) for o in outcomes].count(Conflict) == 1
    assert DagNodeState.objects.get(run=run, node_id="sign-off").status == "success"
    assert DagNodeExecution.objects.filter(run=run, node_id="ship").count() == 1
    assert ApprovalWait.platform.get(id=wait.id).status == "approved"
    assert len(DagNodeState.objects.get(run=run, node_id="sign-off").result["decisions"]) == 2
