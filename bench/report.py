"""A benchmark's result: rows of measurements, printed as a table, written as JSON + markdown."""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass
class Result:
    scenario: str
    columns: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    targets: dict[str, str] = field(default_factory=dict)
    # Further tables of the same run, with columns of their own (printed after this one).
    sections: list[Result] = field(default_factory=list)

    def add(self, **row: Any) -> None:
        self.rows.append(row)

    def table(self) -> str:
        def cell(value: Any) -> str:
            if isinstance(value, float):
                return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"
            return str(value)

        cells = [[cell(row.get(col, "")) for col in self.columns] for row in self.rows]
        widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(self.columns)]
        lines = [
            "| " + " | ".join(c.ljust(w) for c, w in zip(self.columns, widths, strict=True)) + " |",
            "|" + "|".join("-" * (w + 2) for w in widths) + "|",
        ]
        lines += [
            "| " + " | ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) + " |"
            for r in cells
        ]
        lines += [f"- {note}" for note in self.notes]
        lines += [f"- target {name}: {value}" for name, value in self.targets.items()]
        for section in self.sections:
            lines += ["", f"### {section.scenario}", "", section.table()]
        return "\n".join(lines)


def write_result(result: Result) -> list[Path]:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    meta = {
        "scenario": result.scenario,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cpus": _cpus()},
        "columns": result.columns,
        "rows": result.rows,
        "notes": result.notes,
        "targets": result.targets,
        "sections": [
            {"name": s.scenario, "columns": s.columns, "rows": s.rows, "notes": s.notes}
            for s in result.sections
        ],
    }
    json_path = RESULTS_DIR / f"{result.scenario}.json"
    json_path.write_text(json.dumps(meta, indent=2, default=str) + "\n")
    md_path = RESULTS_DIR / f"{result.scenario}.md"
    md_path.write_text(
        f"# {result.scenario}\n\nMeasured {meta['measured_at']}.\n\n{result.table()}\n"
    )
    return [json_path, md_path]


def _cpus() -> int:
    import os

    return os.cpu_count() or 0
