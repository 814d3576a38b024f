"""Maintenance scripts run from the checkout (`python -m scripts.<name>`)."""
