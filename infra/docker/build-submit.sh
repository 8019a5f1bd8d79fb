#!/bin/sh
# /usr/local/bin/build-submit in the webhook image: the webhook server's DEPLOY_SCRIPT, which hands a
# deploy to the target's builder through its spool (infra/builder/submit.ts). APP_ROOT is the image's
# WORKDIR; only the stack rehearsal, which runs the image's files from a temporary folder, sets it.
exec node "${APP_ROOT:-/app}/infra/builder/submit.js" "$@"
