#!/usr/bin/env bash
# Builds the web console (web/src) into web/dist, which is committed and
# embedded in envd (package web). web/web_test.go fails when web/dist is not
# what this script makes from web/src. Needs Node.js 20+ and web/node_modules
# (scripts/setup.sh, or: cd web && npm ci --ignore-scripts).
set -euo pipefail
cd "$(dirname "$0")/../web"
if [ ! -d node_modules/esbuild ]; then
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
fi
npx --no-install tsc -p .
node build.mjs "$@"
