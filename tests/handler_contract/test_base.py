"""Shared handler types: BufferedLogSink and secret masking."""

from __future__ import annotations

import datetime as dt
import threading

from handler_contract.base import (
    MASK,
    BufferedLogSink,
    HandlerOutcome,
    mask_data,
    mask_outcome,
    mask_text,
)


def test_lines_are_timestamped_in_utc_with_their_stream() -> None:
    sink = BufferedLogSink(max_bytes=10_000)
    sink.write("stdout", "hello")
    sink.write("stderr", "oops")
    first, second = sink.lines
    assert (first.stream, first.text) == ("stdout", "hello")
    assert (second.stream, second.text) == ("stderr", "oops")
    stamp = dt.datetime.fromisoformat(first.timestamp)
    assert stamp.utcoffset() == dt.timedelta(0)
    assert sink.text().splitlines()[0] == f"{first.timestamp} [stdout] hello"


def test_truncation_adds_exactly_one_marker_and_counts_dropped_bytes() -> None:
    sink = BufferedLogSink(max_bytes=2_000)
    for i in range(1_000):
        sink.write("stdout", f"line {i:04d} " + "x" * 40)
    assert sink.truncated
    assert sink.kept_bytes <= 2_000
    markers = [line for line in sink.lines if "[log truncated after" in line.text]
    assert len(markers) == 1
    assert markers[0].text == f"[log truncated after {sink.kept_bytes} bytes]"
    assert sink.lines[-1] == markers[0]
    kept = len(sink.lines) - 1
    assert sink.dropped_bytes > (1_000 - kept - 1) * 50
    # Later writes are only counted.
    before = sink.dropped_bytes
    sink.write("stderr", "more")
    assert sink.dropped_bytes == before + len("more") + 1
    assert len(sink.lines) == kept + 1


def test_memory_stays_bounded_for_many_writes() -> None:
    sink = BufferedLogSink(max_bytes=4_096)
    for _ in range(100_000):
        sink.write("stdout", "y" * 100)
    assert len(sink.lines) < 4_096 // 100 + 2
    assert sink.dropped_bytes > 9_000_000


def test_sink_masks_the_secrets_it_is_given() -> None:
    sink = BufferedLogSink(max_bytes=10_000, secrets=("hunter2", "hunter2-extended"))
    sink.write("stdout", "password=hunter2-extended and hunter2")
    assert sink.lines[0].text == f"password={MASK} and {MASK}"
    assert "hunter2" not in sink.text()


def test_sink_is_thread_safe() -> None:
    sink = BufferedLogSink(max_bytes=10**7)

    def writer(name: str) -> None:
        for i in range(2_000):
            sink.write(name, str(i))

    threads = [threading.Thread(target=writer, args=(f"s{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(sink.lines) == 8_000


def test_mask_helpers() -> None:
    assert mask_text("a secret b", ["secret", ""]) == f"a {MASK} b"
    assert mask_data({"secret": ["x secret", 1, None]}, ["secret"]) == {
        MASK: [f"x {MASK}", 1, None]
    }
    outcome = HandlerOutcome(status="failed", result={"k": "secret"}, error_message="secret!")
    mask_outcome(outcome, ("secret",))
    assert outcome.result == {"k": MASK}
    assert outcome.error_message == f"{MASK}!"


def test_masking_covers_the_encoded_forms_of_a_secret():
    import base64
    import json
    from urllib.parse import quote

    from handler_contract.base import SecretMasker

    secret = 'P@ss"w\u00f6rd\\x/+?'
    raw = secret.encode()
    masker = SecretMasker([secret])
    encoded = [
        json.dumps({"x": secret}),
        json.dumps({"x": secret}, ensure_ascii=False),
        repr({"x": secret}),
        repr(raw),
        quote(secret, safe=""),
        raw.hex(),
        base64.b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode(),
    ]
    # base64 of the secret inside longer text, at each of the three alignments.
    encoded += [base64.b64encode(prefix + raw + b"\n").decode() for prefix in (b"", b"a", b"ab")]
    for text in encoded:
        masked = masker.text(text)
        assert "****" in masked, text
        for form in (secret, json.dumps(secret)[1:-1], quote(secret, safe=""), raw.hex()):
            assert form not in masked
