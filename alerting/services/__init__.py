"""Alerting services: incidents, rule checks, notification channels and their delivery."""
