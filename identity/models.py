"""Which local account a person at the identity provider is.

A person is their (issuer, subject) pair, never their e-mail address or user name: the
provider's `email` is whatever its user typed (many providers let them change it), and
matching on it would hand a local account, a break-glass superuser's included, to whoever
sets that address at the provider. So the first login creates an account of its own, linked
here, and later logins find it by the pair.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ProviderIdentity(models.Model):
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="provider_identity"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="uniq_provider_identity")
        ]

    def __str__(self) -> str:
        return f"{self.subject} @ {self.issuer}"
