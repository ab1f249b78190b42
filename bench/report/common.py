"""What every section of the benchmark report shares: reading a result, a Markdown table, the
device a run names, and the plot beside it.

A section is a function of the results directory that returns its Markdown lines (``[]`` when
it has nothing to show); :data:`bench.report.SECTIONS` lists them in the README's order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: a section of the report: the results directory -> its Markdown lines, each without a newline
Section = Callable[[Path], list[str]]

def load_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when there is no such file."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A Markdown table and the blank line after it: floats with two decimals, ``|`` escaped."""
    def cell(value: Any) -> str:
        return f"{value:.2f}" if isinstance(value, float) else str(value).replace("|", "\\|")

    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(cell(v) for v in row) + " |" for row in rows), ""]


def device_files(results: Path, stem: str) -> list[tuple[str, dict[str, Any]]]:
    """``<stem>_<device>.json`` files, CPU first."""
    found = [(p.stem[len(stem) + 1:], load_json(p)) for p in sorted(results.glob(f"{stem}_*.json"))]
    return sorted(((d, data) for d, data in found if data), key=lambda x: (x[0] != "cpu", x[0]))


def plot_link(results: Path, name: str) -> str:
    """`` (plot `NAME`)`` when ``results/NAME`` exists (the docs site shows it there), else nothing."""
    return f" (plot `{name}`)" if (results / name).is_file() else ""


def where(data: dict[str, Any]) -> str:
    """``NVIDIA H100, torch 2.x`` or ``CPU, 2 threads, torch 2.x``: the machine a result names."""
    env = data.get("environment", {})
    gpu = env.get("gpu")
    return (f"{gpu}" if gpu else f"CPU, {env.get('threads', '?')} threads") + f", torch {env.get('torch', '?')}"


def ratio_cell(value: float | None) -> str:
    """A ratio with two decimals, ``-`` when there is none."""
    return "-" if value is None else f"{value:.2f}"
