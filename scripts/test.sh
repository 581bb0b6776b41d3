#!/usr/bin/env bash
# The test command: set up, then run the whole suite (pytest on 2 workers).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python3 -m pytest tests -q -n 2 -p no:cacheprovider "$@"
