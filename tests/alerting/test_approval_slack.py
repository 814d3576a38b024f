"""An approval's announcement in a Slack channel, end to end: the DAG's owner is a Slack
target, the run starts waiting, the announcement goes through a real Redis queue (drained as
a worker would) to a local stand-in for Slack that checks the payload against Slack's
format (tests/alerting/services.py). What people see in the channel (the message's blocks)
carries one signed link per approver, whole however many they are (a section holds 3000
characters), none for the run's triggerer; a link taken from the
channel decides once, for the approver it names only."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from alerting.services.delivery import SLACK_SECTION_MAX, slack_sections
from dags.approval_models import ApprovalDecision
from dags.models import DagNodeState
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from tests.alerting.services import ServiceReceiver
from tests.alerting.test_notifications import drain
from tests.dags.approval_helpers import member, release_dag

pytestmark = pytest.mark.django_db

BOT_TOKEN = "xoxb-test-token"
LINK = re.compile(r"Approve or reject as ([\w.@+-]+): (\S+/dashboard/approvals/\S+)")


@pytest.fixture
def slack(settings, notify_settings):
    server = ServiceReceiver(bot_token=BOT_TOKEN)
    settings.ALERTS = {**settings.ALERTS, "SLACK_API_URL": server.url + "/api"}
    yield server
    server.stop()


def _signed_in(user) -> Client:
    client = Client()
    assert client.login(username=user.username, password="pw-123456")
    return client


def _shown_links(posted: dict) -> dict[str, str]:
    """The links in what Slack shows (the blocks; `text` is only the notification's)."""
    shown = "\n".join(
        block["text"]["text"] for block in posted["body"]["blocks"] if block["type"] == "section"
    )
    return dict(LINK.findall(shown))


def test_the_slack_announcement_carries_each_approvers_link_and_one_decides_once(
    api, tenant, slack, notify_settings, django_capture_on_commit_callbacks
):
    made = api.post(
        "/api/v1/channels",
        {"name": "releases", "kind": "slack", "bot_token": BOT_TOKEN},
        format="json",
    )
    assert made.status_code == 201, made.content
    # Enough approvers that their links pass the 3000 characters of one Slack section.
    names = ["alice", "bob", *(f"operator-{n:02}" for n in range(28))]
    people = {name: member(tenant, name, "operator") for name in names}
    dag = dag_create(tenant=tenant, raw={**release_dag(), "owner": "slack://releases"})
    with django_capture_on_commit_callbacks(execute=True):
        run = dag_trigger(dag=dag, triggered_by="user:acme-admin")
    drain(notify_settings)

    [posted] = slack.at("/api/chat.postMessage")
    assert posted["errors"] == [] and posted["body"]["channel"] == "releases"
    assert "Approval needed: release / sign-off" in posted["body"]["text"]
    links = _shown_links(posted)
    assert set(links) == set(names)  # each whole; the triggerer, acme-admin, gets none
    path = links["alice"][links["alice"].index("/dashboard/") :]

    # Taken from the channel by bob, alice's link decides nothing.
    assert _signed_in(people["bob"]).post(path, {"verdict": "approve"}).status_code == 403
    alice = _signed_in(people["alice"])
    assert alice.post(path, {"verdict": "approve", "comment": "from Slack"}).status_code == 200
    assert alice.post(path, {"verdict": "approve"}).status_code == 410  # once
    decision = ApprovalDecision.objects.get()
    assert (decision.username, decision.via, decision.comment) == ("alice", "link", "from Slack")
    assert DagNodeState.objects.get(run=run, node_id="sign-off").status == "waiting_for_approval"


def test_slack_sections_cut_between_lines_and_never_over_slacks_limit():
    lines = [f"line {n:03} " + "x" * 140 for n in range(60)]
    text = "\n".join(lines)
    sections = slack_sections(text)
    assert all(len(section) <= SLACK_SECTION_MAX for section in sections)
    assert "\n".join(sections) == text  # every line whole, in order
    assert slack_sections("short") == ["short"]
    long_line = slack_sections("a" * 7000)
    assert [len(part) for part in long_line] == [3000, 3000, 1000]
