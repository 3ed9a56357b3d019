"""Where `make bench` figures go: a terminal table, a JSON file, and the docs page's table.

- `print_table(rows)`: a rich table, one line per row, misses in red.
- `write_json(rows, facts)`: benchmarks/results/<UTC timestamp>.json and latest.json (git-ignored),
  with the machine facts (`machine_facts()`: CPU, cores, RAM, versions, load average at start).
- `update_page(path, rows, facts)`: rewrites only what lies between BEGIN and END in the page
  (docs/benchmarks.md);
  ValueError when the markers are missing, out of order or doubled.
"""

from __future__ import annotations

import json
import os
import platform
import time
from importlib import metadata
from pathlib import Path

from benchmarks.harness import Row

RESULTS = Path(__file__).resolve().parent / "results"
BEGIN, END = "<!-- bench:start -->", "<!-- bench:end -->"
VERSIONS = ("torch", "numpy", "transformers", "tokenizers", "tiktoken", "llama_cpp_python")


def fmt(value: float | None, unit: str) -> str:
    """A figure with its unit, to three significant digits or so."""
    if value is None:
        return "-"
    if unit == "%":
        return f"{value:.0%}"
    if unit == "x":
        return f"{value:,.0f}x" if abs(value) >= 100 else f"{value:.2f}x"
    digits = 3 if abs(value) < 1 else 2 if abs(value) < 10 else 1 if abs(value) < 100 else 0
    return f"{value:,.{digits}f} {unit}"


def verdict(met: bool | None) -> str:
    return {True: "yes", False: "NO", None: "-"}[met]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ram_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def machine_facts(threads: int | None = None, command: str = "python -m benchmarks") -> dict:
    """What the figures depend on; call it before the run (the load average is the one at start)."""
    versions = {}
    for name in VERSIONS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    ram = ram_bytes()
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "threads": threads,
        "ram_gib": None if ram is None else round(ram / 2**30, 1),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()]
        if hasattr(os, "getloadavg")
        else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": command,
    }


def machine_line(facts: dict) -> str:
    v = facts["versions"]
    load, end = facts.get("load_average_at_start"), facts.get("load_average_at_end")
    loads = f"load average {load[0] if load else '?'} at start" + (f", {end[0]} at end" if end else "")
    return (
        f"{facts['cpu']}, {facts['cores']} cores ({facts['threads']} threads used), {facts['ram_gib']} GiB RAM, "
        f"{loads}; torch {v.get('torch')}, numpy {v.get('numpy')}, "
        f"transformers {v.get('transformers')}; {facts['started']}"
    )


def print_table(rows: list[Row], console=None, title: str = "decode-dojo benchmarks") -> None:
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
        if not console.is_terminal:  # piped to a file or `make`'s log: rich would assume 80 columns
            console = Console(width=180)
    table = Table(title=title, show_lines=False)
    for name, justify in (
        ("group", "left"),
        ("what", "left"),
        ("ours", "right"),
        ("peer", "left"),
        ("peer figure", "right"),
        ("ratio", "right"),
        ("goal", "left"),
        ("met", "center"),
    ):
        table.add_column(name, justify=justify, overflow="fold", no_wrap=name != "what")
    for r in rows:
        met = {True: "[green]yes[/]", False: "[bold red]NO[/]", None: "-"}[r.met]
        what = r.what + (f" [dim]({r.note})[/]" if r.note else "")
        table.add_row(
            r.group,
            what,
            fmt(r.ours, r.unit),
            r.peer_name or "-",
            fmt(r.peer, r.unit),
            fmt(r.ratio, "x"),
            str(r.goal) if r.goal else "-",
            met,
        )
    console.print(table)


def write_json(rows: list[Row], facts: dict, folder: Path | None = None, extra: dict | None = None) -> Path:
    """Write <timestamp>.json and latest.json under `folder` (default RESULTS); returns the timestamped path."""
    folder = Path(folder or RESULTS)
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"version": 1, "machine": facts, "rows": [r.to_json() for r in rows], **(extra or {})}
    text = json.dumps(doc, indent=2)
    path = folder / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(text)
    (folder / "latest.json").write_text(text)
    return path


def markdown_table(rows: list[Row]) -> str:
    lines = ["| what | ours | peer | peer figure | ratio | goal | met |", "|---|---:|---|---:|---:|---|:-:|"]
    for r in rows:
        what = r.what + (f" ({r.note})" if r.note else "")
        cells = [
            what,
            fmt(r.ours, r.unit),
            r.peer_name or "-",
            fmt(r.peer, r.unit),
            fmt(r.ratio, "x"),
            str(r.goal) if r.goal else "-",
            verdict(r.met),
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def page_block(rows: list[Row], facts: dict, seconds: float | None = None) -> str:
    took = f", in {seconds / 60:.1f} min" if seconds is not None else ""
    return "\n".join(
        [
            f"Latest figures, from `{facts.get('command') or 'python -m benchmarks'}`{took} on {machine_line(facts)}.",
            "Ratios above 1 mean ours is faster (or cheaper); each is measured side by side in that one run.",
            "",
            markdown_table(rows),
        ]
    )


def rewrite_between_markers(text: str, block: str) -> str:
    """`text` with everything between BEGIN and END replaced by `block`; the rest byte for byte."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"the page needs exactly one {BEGIN} followed by one {END}")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{block.strip()}\n{END}{tail}"


def update_page(path: Path, rows: list[Row], facts: dict, seconds: float | None = None) -> None:
    path = Path(path)
    path.write_text(
        rewrite_between_markers(path.read_text(encoding="utf-8"), page_block(rows, facts, seconds)),
        encoding="utf-8",
    )
