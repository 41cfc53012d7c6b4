"""``python tests/support/peak_rss.py PEAK_FILE -m MODULE ARGS...``: run
``python -m MODULE ARGS...``
and, at exit, write this process's peak RSS in KiB (``VmHWM``) to PEAK_FILE.

``VmHWM`` belongs to the process's memory map since its ``exec``: unlike ``ru_maxrss``, it
does not count the parent's memory (with ``vfork``, Linux charges the exec'ing child the
parent's high-water mark: a 300 MiB pytest would make every child look 300 MiB)."""

from __future__ import annotations

import atexit
import runpy
import sys
from pathlib import Path


def _report(peak_file: Path) -> None:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak_file.write_text(line.split()[1])


if __name__ == "__main__":
    peak, flag, module, *rest = sys.argv[1:]
    assert flag == "-m", "usage: peak_rss.py PEAK_FILE -m MODULE ARGS..."
    atexit.register(_report, Path(peak))
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
