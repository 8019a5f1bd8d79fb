# shellcheck shell=bash
# Release helpers shared by scripts/deploy-branch.sh and scripts/host/rollback.sh (sourced, never run).
#
# Layout of one target's directory (DEPLOY_ROOT/<deployPath>), with the modes used under isolation
# (BUILD_USER/SITE_USER set; <site> is the site user's group, of which the build user is a member):
#   .                            root:<site> 0750   nobody of another target gets in
#   deploys/                     root:<site> 0710   enter, not list
#   deploys/<YYYYMMDDHHMMSS>/    one release per deploy (the commit's tree, no .git): while building
#                                <build> 0700; once built owned by root, nothing writable by others;
#                                the live one root:<site> 0750, every other one root:root 0700
#   live -> deploys/<ts>         the active release; switched atomically, relative link
#   repo.git/                    the target's mirror of the repository (root 0700)
#   logs/                        npm-build-<ts>.log and the server's deploy-<ts>-<id>.log (root 0700)
#   cache/                       the build user's HOME and npm cache (<build> 0700)
#   shared/src/content/          external content collection, linked into every release (root:<site> 0750)
#   .deploy.lock                 flock(1) lock: one deploy or rollback at a time per target
#
# Invariants: `live` only ever points at a release whose build finished (marker .release-built);
# a release is only deleted when it is not live; a built release is never written again.

# Marker written into a release once its build succeeded; releases without it are debris of an
# interrupted deploy and may be removed by the next deploy.
mark_release_built() { write_release_file "$1/.release-built" built; }
is_built_release() { [[ -e $1/.release-built ]]; }

# Write a file into a release (as root) without following a link the repository or the build put
# there: whatever has the name is removed, and the file is created exclusively (O_EXCL).
write_release_file() {
  rm -rf -- "$1"
  (set -o noclobber && printf '%s\n' "$2" >"$1")
}

# printf's own clock: no `date` process per log line.
log() { TZ=UTC printf '%(%Y-%m-%dT%H:%M:%SZ)T %s\n' -1 "$*"; }
fail() { log "error: $*" >&2; }

# Step timings of a deploy, from bash's own clock (no process per step): `step <name>` records
# the time since the previous step; `step_summary` prints them on one log line.
step_started=${EPOCHREALTIME/[.,]/}
step_times=()
step() {
  local now=${EPOCHREALTIME/[.,]/}
  step_times+=("$1=$(((now - step_started) / 1000))ms")
  step_started=$now
}
step_summary() {
  local IFS=' '
  log "timings: ${step_times[*]}"
}

# The per-branch systemd unit: astro- plus the target key with / as -. Feature branches
# feature/team-<id>/<anything> belong to the key feature/team-<id>; other branches are their own key.
service_name_for_branch() {
  local branch=$1 key
  if [[ $branch =~ ^(feature/team-[^/]+)/.+ ]]; then
    key=${BASH_REMATCH[1]}
  else
    key=$branch
  fi
  printf 'astro-%s\n' "${key//\//-}"
}

# The target's directories, with the isolation modes when <site group> is given.
prepare_target_dir() {
  local deploy_dir=$1 site_group=$2
  mkdir -p -- "$deploy_dir/deploys" "$deploy_dir/logs" "$deploy_dir/shared/src/content" "$deploy_dir/cache"
  [[ -n $site_group ]] || return 0
  chown -- "root:$site_group" "$deploy_dir" "$deploy_dir/deploys" "$deploy_dir/shared" "$deploy_dir/shared/src" "$deploy_dir/shared/src/content"
  chmod 0750 -- "$deploy_dir" "$deploy_dir/shared" "$deploy_dir/shared/src" "$deploy_dir/shared/src/content"
  chmod 0710 -- "$deploy_dir/deploys"
  chown -- root:root "$deploy_dir/logs"
  chmod 0700 -- "$deploy_dir/logs"
}

# End every process of a (build) user: a build that left the deploy's process group (setsid,
# double fork) must not outlive its deploy. Only ever called for a target's own build user.
kill_processes_of() {
  local user=$1 i
  pgrep -U "$user" >/dev/null 2>&1 || return 0 # the usual case: one look at /proc
  pkill -KILL -U "$user" 2>/dev/null || true
  for i in $(seq 100); do
    pgrep -U "$user" >/dev/null 2>&1 || return 0
    sleep 0.05
    pkill -KILL -U "$user" 2>/dev/null || true
  done
  fail "processes of $user are still running after SIGKILL (attempt $i)"
}

# Fetch one branch into the target's bare mirror (created on first use).
fetch_branch() {
  local mirror=$1 url=$2 branch=$3
  [[ -d $mirror ]] || git init --quiet --bare "$mirror"
  chmod 0700 -- "$mirror"
  git -C "$mirror" fetch --quiet --no-tags --force "$url" "+refs/heads/$branch:refs/heads/$branch"
}

# Under isolation: the built release becomes root's and read-only for everyone else, so neither a
# later build (which shares its dependency files through hard links) nor the site can change it.
seal_release() {
  local release_dir=$1 build_user=$2
  [[ -n $build_user ]] || return 0
  # One walk (GNU find's comma operator): the build user's files become root's, then nothing is
  # writable by group or others and nothing is set-id. chown first: it may clear set-id bits.
  find "$release_dir" \( -user "$build_user" -exec chown -h 0:0 {} + \) , \
    \( ! -type l -perm /6022 -exec chmod go-w,ug-s {} + \)
  chown 0:0 "$release_dir"
  chmod 0700 "$release_dir"
}

# Release directory name the `live` link points at, or nothing when there is no live release.
live_release_name() {
  local deploy_dir=$1 target
  [[ -L $deploy_dir/live ]] || return 0
  target=$(readlink -- "$deploy_dir/live" 2>/dev/null) || return 0
  printf '%s\n' "${target##*/}"
}

# Point `live` at deploys/<name> atomically: a new link under a temporary name, then rename(2)
# over the old one (mv -T), so readers see either the old or the new release, never no link.
# Under isolation the release is opened to the site's group first.
switch_live() {
  local deploy_dir=$1 name=$2 site_group=${3:-}
  local tmp_link="$deploy_dir/.live.tmp.$$"
  if [[ -n $site_group ]]; then
    chgrp -- "$site_group" "$deploy_dir/deploys/$name"
    chmod 0750 -- "$deploy_dir/deploys/$name"
  fi
  ln -sfn -- "deploys/$name" "$tmp_link"
  mv -T -- "$tmp_link" "$deploy_dir/live"
}

# Under isolation, once a release is confirmed live: the site may read that release only.
close_other_releases() {
  local deploy_dir=$1 site_group=$2 live dir name
  local -a others=()
  [[ -n $site_group ]] || return 0
  live=$(live_release_name "$deploy_dir")
  for dir in "$deploy_dir"/deploys/*/; do
    name=${dir%/}
    name=${name##*/}
    [[ -d $dir && $name != "$live" ]] || continue
    is_built_release "$dir" || continue
    others+=("${dir%/}")
  done
  ((${#others[@]})) || return 0
  chown 0:0 -- "${others[@]}"
  chmod 0700 -- "${others[@]}"
}

# Retention after a confirmed deploy: the newest <keep> releases stay, and the live one always
# does. Build logs and the server's deploy logs go with the releases they belong to: a log older
# than the oldest kept release is removed (failed deploys have no release; they go the same way).
prune_releases() {
  local deploy_dir=$1 live=$2 keep=$3 name i oldest_kept=$2 cutoff file
  local -a releases
  local -a names=()
  for file in "$deploy_dir"/deploys/*/; do
    [[ -d $file ]] || continue
    name=${file%/}
    names+=("${name##*/}")
  done
  # Glob order is sorted (release names are fixed-width timestamps); newest first.
  releases=()
  for ((i = ${#names[@]} - 1; i >= 0; i--)); do releases+=("${names[$i]}"); done
  for i in "${!releases[@]}"; do
    name=${releases[$i]}
    if ((i < keep)) || [[ $name == "$live" ]]; then
      oldest_kept=$name
      continue
    fi
    rm -rf -- "${deploy_dir:?}/deploys/$name"
  done
  for file in "$deploy_dir"/logs/npm-build-*.log; do
    [[ -e $file ]] || continue
    name=${file##*/npm-build-}
    name=${name%.log}
    if [[ $name < $oldest_kept ]]; then
      rm -f -- "$file"
    fi
  done
  # Deploy logs are named deploy-<start stamp>-<id>.log; the oldest kept release names its own.
  cutoff=$oldest_kept
  if [[ -f $deploy_dir/deploys/$oldest_kept/.deploy-log ]]; then
    name=$(<"$deploy_dir/deploys/$oldest_kept/.deploy-log")
    [[ $name =~ ^deploy-([0-9]{14})- ]] && cutoff=${BASH_REMATCH[1]}
  fi
  for file in "$deploy_dir"/logs/deploy-*.log; do
    [[ -e $file ]] || continue
    name=${file##*/deploy-}
    if [[ ${name:0:14} =~ ^[0-9]{14}$ && ${name:0:14} < $cutoff ]]; then
      rm -f -- "$file"
    fi
  done
}

# Run $RESTART_COMMAND <service>, split on spaces (no shell, no quoting), with DEPLOY_DIR, PORT,
# RELEASE_DIR and SITE_USER in its environment for restart commands that are not systemd. The lock
# descriptor is closed for it: a site process started by the command must not inherit (and hold) the lock.
restart_service() {
  local service=$1 deploy_dir=$2 port=$3
  local -a restart_cmd
  IFS=' ' read -r -a restart_cmd <<<"${RESTART_COMMAND:-sudo systemctl restart}"
  DEPLOY_DIR="$deploy_dir" PORT="$port" RELEASE_DIR="$deploy_dir/live" SITE_USER="${SITE_USER:-}" "${restart_cmd[@]}" "$service" 9>&-
}

# Wait until the site answers HTTP on 127.0.0.1:<port> with a status below 500. Each try is bash's
# own /dev/tcp connection (no curl process per poll), in a subshell so a site that accepts but
# never answers cannot hold the check past its 2 s per try.
health_check() {
  local port=$1 timeout=${HEALTH_TIMEOUT_SECONDS:-30} path=${HEALTH_PATH:-/}
  local deadline=$((SECONDS + timeout))
  while ((SECONDS < deadline)); do
    if http_status_below_500 "$port" "$path" 9>&-; then
      return 0
    fi
    sleep 0.02
  done
  return 1
}

# One HTTP/1.0 GET of <path> on 127.0.0.1:<port>: succeeds when the status line says 1xx–4xx.
http_status_below_500() {
  local port=$1 path=$2 line
  (
    exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
    printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1:%s\r\nConnection: close\r\n\r\n' "$path" "$port" >&3
    IFS= read -r -t 2 line <&3 || exit 1
    [[ $line =~ ^HTTP/[0-9.]+\ [1-4][0-9][0-9] ]]
  ) 2>/dev/null
}

# Take the per-target lock on file descriptor 9, waiting up to LOCK_WAIT_SECONDS (default 900).
take_lock() {
  local deploy_dir=$1
  exec 9>"$deploy_dir/.deploy.lock"
  flock -w "${LOCK_WAIT_SECONDS:-900}" 9
}
