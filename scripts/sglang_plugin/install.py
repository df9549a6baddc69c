#!/usr/bin/env python3
"""Install specbench_pld.py into SITE_DIR (a directory on PYTHONPATH) as a distribution with an
``sglang.srt.plugins`` entry point, without pip or a build backend (works offline):

    python3 scripts/sglang_plugin/install.py /tmp/site
"""

import shutil
import sys
from pathlib import Path

NAME, VERSION = "specbench_pld", "0.1.0"


def install(site: Path) -> Path:
    site.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(__file__).with_name(f"{NAME}.py"), site / f"{NAME}.py")
    info = site / f"{NAME}-{VERSION}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n")
    (info / "entry_points.txt").write_text(f"[sglang.srt.plugins]\npld = {NAME}:register\n")
    (info / "RECORD").write_text("")
    return info


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} SITE_DIR")
    print("installed", install(Path(sys.argv[1])))
