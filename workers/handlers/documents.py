"""The design document's branching example, as handlers a DAG node can name.

`DocumentClassifier` decides whether a document is an invoice or a receipt; the DAG sends an
invoice to `InvoiceProcessor` and a receipt to `ReceiptProcessor`:

    {"dag": "document-processing", "tasks": [
        {"id": "classify", "handler": "DocumentClassifier"},
        {"id": "process-invoice", "handler": "InvoiceProcessor", "depends_on": ["classify"],
         "condition": {"field": "classify.result.type", "equals": "invoice"}}, ...]}

They read the run's `document` parameter (the text; POST .../trigger
{"parameters": {"document": "INVOICE No. 2024-117 ... Total due: EUR 1,250.00"}}). The
classification is a keyword score, small on purpose: the example is about the DAG, and a
real classifier registers itself under the same name from its own module
(PYTHON_HANDLER_MODULES).
"""

from __future__ import annotations

import re
from typing import Any

from handler_contract.base import PermanentError
from handler_contract.registry import handler

INVOICE_WORDS = ("invoice", "amount due", "total due", "bill to", "due date", "payment terms")
RECEIPT_WORDS = ("receipt", "thank you for your purchase", "change", "cash", "paid", "card ****")
_AMOUNT = re.compile(
    r"(?:total(?: due)?|amount due|amount)\s*:?\s*"
    r"([A-Z]{3}|[$€£])?\s*([0-9][0-9,]*(?:\.[0-9]{2})?)",
    re.IGNORECASE,
)
_INVOICE_NUMBER = re.compile(r"invoice\s*(?:no\.?|number|#)\s*:?\s*([A-Za-z0-9-]+)", re.IGNORECASE)


def _text(document: Any) -> str:
    if not isinstance(document, str) or not document.strip():
        raise PermanentError("the run needs a `document` parameter: the document's text")
    return document


def _score(text: str, words: tuple[str, ...]) -> int:
    lowered = text.lower()
    return sum(lowered.count(word) for word in words)


def _total(text: str) -> dict[str, Any] | None:
    match = _AMOUNT.search(text)
    if match is None:
        return None
    return {"currency": match.group(1) or None, "amount": float(match.group(2).replace(",", ""))}


@handler("DocumentClassifier")
def document_classifier(document: Any = None, **_parameters: Any) -> dict[str, Any]:
    """{"type": "invoice" | "receipt" | "unknown", "scores": {...}}."""
    text = _text(document)
    scores = {"invoice": _score(text, INVOICE_WORDS), "receipt": _score(text, RECEIPT_WORDS)}
    best = max(scores, key=lambda kind: scores[kind])
    tied = scores["invoice"] == scores["receipt"]
    return {"type": "unknown" if tied else best, "scores": scores, "characters": len(text)}


@handler("InvoiceProcessor")
def invoice_processor(document: Any = None, **_parameters: Any) -> dict[str, Any]:
    text = _text(document)
    number = _INVOICE_NUMBER.search(text)
    return {
        "processed_as": "invoice",
        "invoice_number": number.group(1) if number else None,
        "total": _total(text),
    }


@handler("ReceiptProcessor")
def receipt_processor(document: Any = None, **_parameters: Any) -> dict[str, Any]:
    text = _text(document)
    first_line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return {"processed_as": "receipt", "merchant": first_line[:200], "total": _total(text)}
