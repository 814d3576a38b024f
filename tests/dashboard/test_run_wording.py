"""How a run's end reads, and how matched log lines are cut for marking (pure functions)."""

from __future__ import annotations

from dashboard.log_hits import Piece, highlighted
from dashboard.run_wording import dag_outcome_text, error_text
from scheduler_app.selectors.run_log_search import search_terms


def test_cancelled_cancelled_after_reads_once_with_a_spaced_unit():
    assert error_text("cancelled", "cancelled after 23.0s") == "cancelled after 23.0 s"
    assert error_text("cancelled", "Cancelled before it started") == "Cancelled before it started"
    assert error_text("worker_lost", "worker lost: lease expired") == "worker lost: lease expired"
    assert error_text("http_error", "503 from upstream") == "http_error: 503 from upstream"
    assert error_text("timeout", "") == "timeout"
    assert error_text("", "took 120ms to refuse") == "took 120 ms to refuse"
    assert error_text("", "") == ""


def test_a_dag_outcome_names_the_failed_and_the_never_run_nodes():
    assert dag_outcome_text([("transform", "failed")], ["load"]) == (
        "transform failed, load not run"
    )
    assert dag_outcome_text([("a", "failed"), ("b", "timed_out")], []) == "a failed, b timed out"
    many = [(f"n{i}", "failed") for i in range(5)]
    assert dag_outcome_text(many, ["x", "y"]) == "n0, n1, n2 and 2 more failed, x, y not run"


def test_search_terms_keep_phrases_and_drop_excluded_words_and_or():
    assert search_terms('"connection refused" host-7 -ok or retry') == [
        "connection refused",
        "host-7",
        "retry",
    ]


def test_highlighted_marks_every_match_case_insensitively_longest_first():
    assert highlighted("Got ECONNREFUSED, then econnrefused", ["econnrefused"]) == [
        Piece("Got ", False),
        Piece("ECONNREFUSED", True),
        Piece(", then ", False),
        Piece("econnrefused", True),
    ]
    assert highlighted("connection refused", ["connection", "connection refused"]) == [
        Piece("connection refused", True)
    ]
    assert highlighted("<b>x</b>", []) == [Piece("<b>x</b>", False)]
