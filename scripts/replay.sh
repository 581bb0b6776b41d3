#!/usr/bin/env bash
# The main job: set up, then replay the committed captures (captures/*.db) against the current code on the
# default device. Extra arguments go to `replay check` (e.g. -v, --report-md FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec replay check "$@"
