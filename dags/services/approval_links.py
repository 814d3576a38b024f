"""The signed one-time links of an approval's announcement.

A link names one approver and one wait: `signing.dumps({"w": wait, "u": user, "n": nonce})`
under SECRET_KEY with a salt of its own (django.core.signing: HMAC-SHA256), so a link cannot
be forged or pointed at another wait or user; a changed character is refused as not valid.
It is opened signed in (the dashboard's login), as the user it names: forwarded to a
colleague, or posted to a channel, it decides nothing for anyone else. It expires with the
wait (its deadline, or its end), and works once: the decision keeps the link's nonce (a
unique column), so a second use is refused as used (410), even by its own approver.

Opening a link (GET) only shows the approval: mail scanners and chat previews fetch links,
and a fetch must not decide. The decision is the page's POST.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from django.core import signing
from django.utils import timezone

from dags.approval_models import ApprovalDecision, ApprovalWait
from dags.choices import ApprovalInterface, ApprovalWaitStatus
from dags.services.approvals import Decided, approval_decide
from scheduler_app.errors import Forbidden, Gone, NotFound

SALT = "dags.approval-link"


@dataclass(frozen=True)
class OpenedLink:
    wait: ApprovalWait
    user_id: int
    nonce: str


def approval_link_token(*, wait: ApprovalWait, user_id: int) -> str:
    return signing.dumps({"w": wait.id, "u": user_id, "n": secrets.token_hex(12)}, salt=SALT)


def approval_link_open(*, token: str, user: Any) -> OpenedLink:
    """The wait a link is for, if it is valid, unused and its wait still open, and `user` is
    the approver it names."""
    try:
        payload = signing.loads(token, salt=SALT)
        wait_id, user_id, nonce = int(payload["w"]), int(payload["u"]), str(payload["n"])
    except (signing.BadSignature, KeyError, TypeError, ValueError) as error:
        raise NotFound("this approval link is not valid") from error
    wait = ApprovalWait.platform.select_related("run", "run__dag").filter(id=wait_id).first()
    if wait is None:
        raise NotFound("this approval link is not valid")
    if user.pk != user_id:
        raise Forbidden("this approval link was sent to another approver")
    if ApprovalDecision.objects.filter(link_nonce=nonce).exists():
        raise Gone("this approval link was already used")
    if wait.status != ApprovalWaitStatus.WAITING or wait.deadline <= timezone.now():
        raise Gone(f"this approval is no longer open (it is {wait.status})")
    return OpenedLink(wait=wait, user_id=user_id, nonce=nonce)


def approval_link_decide(*, token: str, user: Any, verdict: str, comment: str = "") -> Decided:
    opened = approval_link_open(token=token, user=user)
    return approval_decide(
        wait_id=opened.wait.id,
        user=user,
        verdict=verdict,
        comment=comment,
        via=ApprovalInterface.LINK,
        link_nonce=opened.nonce,
    )
