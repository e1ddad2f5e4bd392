"""What the benchmark scripts print beside their numbers: the CPU and the load.

Imported by the scripts in tools/ (run as `python tools/NAME.py`, so this
folder is on sys.path)."""
import platform
import re
import subprocess


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
