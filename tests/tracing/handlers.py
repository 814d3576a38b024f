"""A python handler for the tracing tests, run by real workers (PYTHON_HANDLER_MODULES:
`MODULES`); the test process imports it so that tasks may name it."""

from __future__ import annotations

import logging

from handler_contract.registry import handler

MODULES = "workers.handlers.builtin,tests.tracing.handlers"
LINE = "a line the handler logged through Python logging"

logger = logging.getLogger("tests.tracing.handlers")


@handler("test.logs_a_line")
def logs_a_line() -> dict:
    logger.warning(LINE)
    return {}
