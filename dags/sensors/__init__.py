"""Sensor pokers: one question each ("is it there yet?"), asked once, with a timeout.

Pure Python, no Django: each poker takes its sensor's normalized config with the secrets
already filled in, the hosts the tenant may reach although they are private, and a timeout,
and returns a `Poke`. The housekeeping that schedules them, resolves the secrets and records
the answers is `dags.services.timers` / `dags.services.sensor_rounds`.

Every poker goes through the platform's one SSRF guard (`handler_contract.ssrf`): the host
is resolved once and refused, never contacted, when any address is private, loopback,
link-local or a metadata address, unless the tenant's `webhook_allowed_hosts` lists it.
A refusal is final (`Poke.refused`): polling again would not change the answer.
"""
