"""Copy the console screenshots docs/console.md shows from the browser tests' last run into docs/console/.

``make docs-screenshots`` runs the browser tests, then this. Each picture is re-encoded with an adaptive
palette of 64 colours (the console's few colours and their anti-aliasing survive, the files shrink), so
the committed pictures stay small; tests/project/test_docs_console.py holds them to a total size."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from PIL import Image

from tests.support.browser import ROOT, SCREENSHOTS

PAGE = ROOT / "docs" / "console.md"
PICTURES = ROOT / "docs" / "console"
# ![alt](console/name.png): the pictures the page shows
SHOWN = re.compile(r"!\[[^\]]*\]\(console/([a-z0-9-]+\.png)\)")


def shown() -> list[str]:
    """The file names of the pictures docs/console.md shows, in page order."""
    return SHOWN.findall(PAGE.read_text(encoding="utf-8"))


def publish(source: Path = SCREENSHOTS, target: Path = PICTURES) -> int:
    """Re-encode every shown picture from ``source`` into ``target``; returns the total bytes written."""
    target.mkdir(parents=True, exist_ok=True)
    missing = [name for name in shown() if not (source / name).is_file()]
    if missing:
        raise SystemExit(f"not in {source} (run the browser tests first): {', '.join(missing)}")
    total = 0
    for name in shown():
        with Image.open(source / name) as picture:
            palette = picture.convert("RGB").quantize(
                colors=64, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
            )
        palette.save(target / name, optimize=True)
        total += (target / name).stat().st_size
    return total


if __name__ == "__main__":
    written = publish(Path(sys.argv[1]) if len(sys.argv) > 1 else SCREENSHOTS)
    print(f"{len(shown())} pictures, {written // 1024} KiB in {PICTURES.relative_to(ROOT)}/")
