#!/usr/bin/env bash
# Test stand-in for deploy-branch.sh at the webhook server's process boundary: records its argument
# vector (one JSON array per call, built by node so every byte stays data) and selected environment
# variables, then sleeps RECORD_DEPLOY_SLEEP seconds and exits RECORD_DEPLOY_EXIT.
set -euo pipefail
node -e '
  const fs = require("node:fs");
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => /^(SECRET_|WEBHOOK_|SERVICE_NAME|RESTART_COMMAND|KEEP_RELEASES)/.test(k)));
  fs.appendFileSync(process.env.RECORD_DEPLOY_FILE, JSON.stringify({ args: process.argv.slice(1), env, pid: process.ppid }) + "\n");
' -- "$@"
echo "recorded deploy of $1"
sleep "${RECORD_DEPLOY_SLEEP:-0}"
exit "${RECORD_DEPLOY_EXIT:-0}"
