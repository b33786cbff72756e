"""The console's page in the docs shows pictures the browser tests took: every one it shows is committed
under docs/console/, nothing else is, and together they stay small (they are in every clone)."""

from __future__ import annotations

from PIL import Image

from tests.support.docs_screenshots import PICTURES, shown

MOST_BYTES = 500 * 1024


def test_the_console_page_shows_committed_small_pictures() -> None:
    names = shown()
    assert len(names) >= 6, names
    committed = sorted(p.name for p in PICTURES.glob("*"))
    assert committed == sorted(names), (committed, names)
    for name in names:
        with Image.open(PICTURES / name) as picture:
            assert picture.format == "PNG" and picture.width >= 1000, (name, picture.size)
    total = sum((PICTURES / name).stat().st_size for name in names)
    assert total <= MOST_BYTES, total
