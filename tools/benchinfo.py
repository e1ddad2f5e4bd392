"""What the benchmark scripts print beside their numbers (the CPU and the load) and
how they print them (Markdown tables as in BENCHMARKS.md, a JSON copy, percentiles).

Imported by the scripts in tools/ (run as `python tools/NAME.py`, so this
folder is on sys.path)."""
import json
import platform
import re
import subprocess
from typing import Any, Iterable, List, Optional, Sequence


def cpu_model() -> str:
    """lscpu's model name (BENCHMARKS.md names the CPU beside every table)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, errors="replace").stdout
        m = re.search(r"Model name:\s*(.+)", out)
        return m.group(1).strip() if m else platform.processor()
    except OSError:
        return platform.processor()


def loadavg() -> float:
    with open("/proc/loadavg") as fh:
        return float(fh.read().split()[0])


def table_row(cells: Sequence[str]) -> str:
    """One line of a Markdown table (BENCHMARKS.md's tables)."""
    return "| " + " | ".join(cells) + " |"


def table_head(header: Sequence[str], sep: Optional[Sequence[str]] = None) -> List[str]:
    """The header line and the separator line (``---`` per column unless given,
    e.g. ``---:`` for a right-aligned one)."""
    return [table_row(header), "|" + "".join(f"{s}|" for s in (sep or ["---"] * len(header)))]


def print_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    print("\n".join(table_head(header) + [table_row(r) for r in rows]))


def write_json(path: Optional[str], results: Any) -> None:
    """The results as JSON at path (--json), when one is given."""
    if path:
        with open(path, "w") as fh:
            json.dump(results, fh, indent=1)


def percentile(ordered: Sequence[float], p: float) -> float:
    """The nearest-rank p-quantile (0 <= p <= 1) of sorted values."""
    return ordered[min(len(ordered) - 1, int(round(p * (len(ordered) - 1))))]
