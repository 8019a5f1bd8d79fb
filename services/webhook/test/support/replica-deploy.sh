#!/usr/bin/env bash
# Test stand-in for deploy-branch.sh in the replica tests (services/webhook/test/replicas.test.ts): appends a
# line when it starts and one when it ends (the commit, its pid, the time in ms) to RECORD_DEPLOY_FILE,
# shared by every replica, sleeps RECORD_DEPLOY_SLEEP seconds in between (a branch ending in /slow:
# two minutes, a deploy a test kills its replica under), and at the end makes the commit live as the
# real script does (deploys/<release>/REVISION, `live` pointing at it), so the launcher reads it.
set -euo pipefail
IFS=$'\n\t'
deploy_dir=${2:?usage: replica-deploy.sh <branch> <deployDir> <port> <repo> <commit>}
commit=${5:?usage: replica-deploy.sh <branch> <deployDir> <port> <repo> <commit>}
seconds=${RECORD_DEPLOY_SLEEP:-0}
[[ $1 == */slow ]] && seconds=120
printf '{"event":"start","commit":"%s","pid":%d,"at":%d}\n' "$commit" "$$" "$(date +%s%3N)" >>"$RECORD_DEPLOY_FILE"
sleep "$seconds"
release=$(date -u +%Y%m%d%H%M%S)
mkdir -p -- "$deploy_dir/deploys/$release"
printf '%s\n' "$commit" >"$deploy_dir/deploys/$release/REVISION"
ln -sfn -- "deploys/$release" "$deploy_dir/live.next"
mv -T -- "$deploy_dir/live.next" "$deploy_dir/live"
printf '{"event":"end","commit":"%s","pid":%d,"at":%d}\n' "$commit" "$$" "$(date +%s%3N)" >>"$RECORD_DEPLOY_FILE"
