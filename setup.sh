#!/usr/bin/env bash
# Create .venv and install toylens with its test tools. Safe to rerun: it reinstalls only when
# pyproject.toml changed. torch is installed first, pinned to the CPU wheel, so nothing pulls a
# multi-GB CUDA build. Ray (an optional extra, for sweeps on a cluster) is installed so the tests
# cover it.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv 2>/dev/null || [ -x .venv/bin/python ]
stamp=.venv/.toylens-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
# Each step says what it waits for: the downloads take minutes on a first run.
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: 1/3 installing torch 2.13.0 (CPU wheel, ~200 MB; a few minutes on a first run)..."
  .venv/bin/python -m pip install -q "torch==2.13.0" 2>&1 | { grep -v "is ignored" || true; }
  echo "setup: 2/3 installing toylens and its dependencies (TransformerLens, datasets, ray, test tools)..."
  .venv/bin/python -m pip install -q -e ".[dev,ray]" 2>&1 | { grep -v "is ignored" || true; }
  echo "setup: 3/3 checking that everything imports..."
  .venv/bin/python -c "import torch, transformer_lens, models, tasks, probes"
  echo "$want" > "$stamp"
  echo "setup: done (.venv is ready; rerunning this script reinstalls only when pyproject.toml changes)"
else
  echo "setup: .venv is up to date with pyproject.toml; nothing to install"
fi
