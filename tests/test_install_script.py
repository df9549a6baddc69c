"""scripts/install.sh (README "Install"): PyTorch's CPU index is named to pip only when it answers
the probe within SPECBENCH_PROBE_S; an index that never answers is left out, said, and the install
goes on at once. pip is replaced by a recorder here: what is asserted is the command it was given."""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
SCRIPT = ROOT / "scripts" / "install.sh"

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or shutil.which("nvidia-smi") is not None or shutil.which("timeout") is None,
    reason="the probe runs on Linux without an NVIDIA GPU (coreutils' timeout)",
)


def _recorder(tmp_path: Path) -> Path:
    """A ``python`` on PATH that runs the probe (``python - URL S``) with this interpreter and
    records any other command (``python -m pip ...``) to pip.txt instead of running it."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "python").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = - ]; then exec {sys.executable} "$@"; fi\n'
        f'printf "%s\\n" "$*" >> {tmp_path / "pip.txt"}\n'
    )
    (bin_ / "python").chmod(0o755)
    return bin_


def _run(tmp_path: Path, index: str) -> tuple[subprocess.CompletedProcess, str]:
    env = {
        **os.environ,
        "PATH": f"{_recorder(tmp_path)}{os.pathsep}{os.environ['PATH']}",
        "VIRTUAL_ENV": str(tmp_path),  # "active": the script makes no .venv
        "SPECBENCH_TORCH_INDEX": index,
        "SPECBENCH_PROBE_S": "1",
    }
    r = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run"], env=env, capture_output=True, text=True, timeout=60
    )
    return r, (tmp_path / "pip.txt").read_text()


@pytest.fixture
def silent_index() -> Iterator[str]:
    """An HTTPS address that accepts connections and never answers (a dropped or stalled index)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)  # the kernel completes the handshake; nothing ever reads or writes
    yield f"https://127.0.0.1:{s.getsockname()[1]}/whl/cpu"
    s.close()


@pytest.fixture
def answering_index(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "idx" / "torch").mkdir(parents=True)
    (tmp_path / "idx" / "torch" / "index.html").write_text("<html></html>")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):  # type: ignore[no-untyped-def]
            super().__init__(*a, directory=str(tmp_path / "idx"), **kw)

        def log_message(self, *a):  # type: ignore[no-untyped-def]
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_an_index_that_never_answers_is_left_out_and_said(tmp_path: Path, silent_index: str) -> None:
    r, pip = _run(tmp_path, silent_index)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"install: {silent_index} not read within 1 s: torch from pip's configured indexes" in r.stdout
    assert pip.strip() == "-m pip install -e .[cpu] --dry-run"  # no --extra-index-url
    assert "--extra-index-url" not in pip


def test_an_index_that_answers_is_named_to_pip(tmp_path: Path, answering_index: str) -> None:
    r, pip = _run(tmp_path, answering_index)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"install: torch's CPU build from {answering_index}" in r.stdout
    assert pip.strip() == f"-m pip install --extra-index-url {answering_index} -e .[cpu] --dry-run"
