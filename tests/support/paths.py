"""Where the tests find the checkout and the example config repo."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "config-repo-template"
DATA = ROOT / "tests" / "data"
