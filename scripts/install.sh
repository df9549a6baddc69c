#!/usr/bin/env bash
# The CPU install (README "Install"): `python -m pip install -e ".[cpu]"` in the active virtual
# environment (none active: ./.venv, made if missing), and on Linux without an NVIDIA GPU the CPU
# build of torch from PyTorch's CPU index, when that index answers within SPECBENCH_PROBE_S
# seconds (default 5). Where it does not (no route, a proxy that drops it, an offline mirror),
# torch comes from the indexes pip is configured with (PyPI by default: its Linux wheel is the CUDA
# build, larger, and runs the same on a CPU), and the line says so: an unreachable extra index
# would otherwise cost the install pip's retries on every package it looks up (minutes).
# Extra arguments go to pip; SPECBENCH_TORCH_INDEX names another CPU index.
set -euo pipefail
cd "$(dirname "$0")/.."
index=${SPECBENCH_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
probe_s=${SPECBENCH_PROBE_S:-5}
if [ -z "${VIRTUAL_ENV:-}" ]; then
  [ -x .venv/bin/python ] || python3 -m venv .venv
  # shellcheck disable=SC1091
  . .venv/bin/activate
fi
extra=()
if [ "$(uname -s)" = Linux ] && ! command -v nvidia-smi > /dev/null 2>&1; then
  # the page pip would read first; `timeout` bounds the name lookup too, which urllib's does not
  if timeout "$((probe_s + 1))" python - "${index%/}/torch/" "$probe_s" <<'PY'; then
import sys
import urllib.request

try:
    urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])).close()
except Exception as e:  # what the index answered, if anything
    print(f"install: {sys.argv[1]}: {getattr(e, 'reason', e)}")
    sys.exit(1)
PY
    extra=(--extra-index-url "$index")
    echo "install: torch's CPU build from $index"
  else
    echo "install: $index not read within ${probe_s} s: torch from pip's configured indexes instead"
  fi
fi
python -m pip install ${extra[@]+"${extra[@]}"} -e ".[cpu]" "$@"
