"""Regenerate the README's pictures in ``docs/`` from the browser tests' screenshots.

The browser tests (``tests/app/web/test_dashboard_browser.py``) run a real service, plant simulator and
broker and leave screenshots in ``test-artifacts/dashboard/``: the greenhouse page at 1280 px with live
data on every panel (``docs/dashboard.png``), the alarm list after an acknowledgement
(``docs/alarms.png``), the settings panel after a band was edited (``docs/settings.png``) and the twin's
24-hour forecast with a what-if beside it (``docs/forecast.png``). This runs those tests and writes
each screenshot to the docs as a 256-colour PNG (the pages are flat colours: a fraction of the size at
the same width), scaled down only if it would still be over the limit.

    python bench/dashboard_screenshot.py                 # run the browser tests, then write the PNGs
    python bench/dashboard_screenshot.py --no-test       # from the last run's screenshots
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "test-artifacts" / "dashboard"
PICTURES = {"greenhouse-economics.png": "dashboard.png", "alarms.png": "alarms.png",
            "settings.png": "settings.png", "forecast.png": "forecast.png"}
"""Screenshot the browser tests leave -> picture in docs/."""
DOCS = ROOT / "docs"
MAX_BYTES = 400_000
TESTS = ["tests/app/web/test_dashboard_browser.py::" + name for name in (
    "test_economic_tiles_and_the_outlook_chart", "test_alarm_acknowledge_records_the_operator",
    "test_a_band_edited_on_the_page_is_used_and_explained_by_the_next_decision",
    "test_the_twins_forecast_and_a_what_if_beside_it")]


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
    ap.add_argument("--no-test", action="store_true",
                    help="use the screenshots the last browser test run left")
    ap.add_argument("--out", type=Path, default=DOCS, help="folder the pictures go to")
    args = ap.parse_args()
    if not args.no_test:
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS], cwd=ROOT,
                       check=True)
    missing = [name for name in PICTURES if not (SHOTS / name).exists()]
    if missing:
        sys.exit(f"no screenshot {', '.join(missing)} in {SHOTS}: run the browser tests first")
    for shot_name, picture in PICTURES.items():
        with Image.open(SHOTS / shot_name) as shot:
            data = compact(shot)
            size = shot.size
        out = args.out / picture
        out.write_bytes(data)
        with Image.open(out) as written:
            print(f"{out}: {written.width}x{written.height} from {size[0]}x{size[1]}, "
                  f"{len(data) / 1000:.0f} kB")

if __name__ == "__main__":
    main()
