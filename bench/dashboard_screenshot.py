"""Regenerate ``docs/dashboard.png`` (the README's picture) from the browser test's greenhouse page.

The browser test (``tests/app/test_dashboard_browser.py``) runs a real service, plant simulator and
broker, and leaves a full-page screenshot of the greenhouse page at 1280 px wide, live data on every
panel, in ``test-artifacts/dashboard/greenhouse-economics.png``. This runs that one test and writes the
screenshot to the docs as a 256-colour PNG (the page is flat colours: a fraction of the size at the
same width), scaled down only if it would still be over the limit.

    python bench/dashboard_screenshot.py                 # run the browser test, then write the PNG
    python bench/dashboard_screenshot.py --no-test       # from the last run's screenshot
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
SHOT = ROOT / "test-artifacts" / "dashboard" / "greenhouse-economics.png"
DOCS = ROOT / "docs" / "dashboard.png"
MAX_BYTES = 400_000
TEST = "tests/app/test_dashboard_browser.py::test_economic_tiles_and_the_outlook_chart"


def compact(image: Image.Image, max_bytes: int = MAX_BYTES) -> bytes:
    """PNG bytes of ``image`` in 256 colours, scaled by 0.9 at a time until under ``max_bytes``."""
    img = image.convert("RGB")
    while True:
        out = io.BytesIO()
        img.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
            out, format="PNG", optimize=True)
        if out.tell() <= max_bytes or img.width < 640:
            return out.getvalue()
        img = img.resize((int(img.width * 0.9), int(img.height * 0.9)), Image.Resampling.LANCZOS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-test", action="store_true", help="use the screenshot the last browser test run left")
    ap.add_argument("--out", type=Path, default=DOCS)
    args = ap.parse_args()
    if not args.no_test:
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TEST], cwd=ROOT, check=True)
    if not SHOT.exists():
        sys.exit(f"no screenshot at {SHOT}: run the browser test first")
    with Image.open(SHOT) as shot:
        data = compact(shot)
        size = shot.size
    args.out.write_bytes(data)
    with Image.open(args.out) as written:
        print(f"{args.out}: {written.width}x{written.height} from {size[0]}x{size[1]}, {len(data) / 1000:.0f} kB")


if __name__ == "__main__":
    main()
