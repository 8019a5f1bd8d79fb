#!/bin/sh
# Off-host copy of the backup volume (docs/infra.md "Backups off the host"): the loop of the stack's
# backup-offsite container (the rclone image), which mounts the dumps read-only and reaches nothing
# but the outside world.
#
# Every BACKUP_OFFSITE_INTERVAL_MINUTES it copies each complete dump (BACKUP_DIR/<db>/<db>-<stamp>.dump;
# never a .partial file) to BACKUP_OFFSITE_TARGET through rclone's crypt layer: contents and names are
# encrypted with BACKUP_OFFSITE_PASSPHRASE before they leave the host. It only adds: a dump deleted here
# (retention) stays in the bucket, and a dump already there is never overwritten (--immutable), so
# the bucket's own lifecycle rule decides how long copies live. STATE_DIR/last-offsite-success holds
# the time of the last complete copy; the health check fails when it is older than two intervals.
#
#   backup-offsite.sh               the loop
#   backup-offsite.sh once          one copy, then exit (drills, tests)
#   backup-offsite.sh list          the dumps in the bucket (decrypted names, sizes)
#   backup-offsite.sh fetch <db>/<db>-<stamp>.dump
#                                   one dump from the bucket, decrypted, on standard output
#
# The remote is rclone's, configured by environment (RCLONE_CONFIG_OFFSITE_TYPE=s3, _PROVIDER,
# _ENDPOINT, _REGION, _ACCESS_KEY_ID, _SECRET_ACCESS_KEY); BACKUP_OFFSITE_TARGET names it and the
# bucket, e.g. offsite:geodata-backups/prod. Exit codes: 0 ok, 1 a copy failed, 2 usage; list and
# fetch exit with rclone's code (non-zero on any failure).
set -eu

BACKUP_DIR=${BACKUP_DIR:-/backups}
STATE_DIR=${BACKUP_OFFSITE_STATE_DIR:-/state}
INTERVAL_MINUTES=${BACKUP_OFFSITE_INTERVAL_MINUTES:-60}
: "${BACKUP_OFFSITE_TARGET:?BACKUP_OFFSITE_TARGET is required, e.g. offsite:geodata-backups/prod}"
: "${BACKUP_OFFSITE_PASSPHRASE:?BACKUP_OFFSITE_PASSPHRASE is required (encrypts the dumps before they leave the host)}"
case "$INTERVAL_MINUTES" in
  ''|*[!0-9]*) echo "BACKUP_OFFSITE_INTERVAL_MINUTES must be a whole number" >&2; exit 2 ;;
esac

log() { printf '%s backup-offsite: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"; }

# The crypt remote over the target; rclone wants its password obscured, read from stdin so the
# passphrase never appears in a process list.
RCLONE_CONFIG_OFFSITECRYPT_TYPE=crypt
RCLONE_CONFIG_OFFSITECRYPT_REMOTE=$BACKUP_OFFSITE_TARGET
RCLONE_CONFIG_OFFSITECRYPT_PASSWORD=$(printf '%s' "$BACKUP_OFFSITE_PASSPHRASE" | rclone obscure -)
export RCLONE_CONFIG_OFFSITECRYPT_TYPE RCLONE_CONFIG_OFFSITECRYPT_REMOTE RCLONE_CONFIG_OFFSITECRYPT_PASSWORD
unset BACKUP_OFFSITE_PASSPHRASE
# Everything is configured by environment; rclone reads no config file (and says so no more).
RCLONE_CONFIG=/notfound
export RCLONE_CONFIG

copy() {
  if rclone copy "$BACKUP_DIR" offsitecrypt: --include '/*/*.dump' --immutable --stats-log-level NOTICE --stats 0; then
    mkdir -p "$STATE_DIR"
    date -u +%s > "$STATE_DIR/last-offsite-success"
    log "copied the dumps to $BACKUP_OFFSITE_TARGET"
  else
    log "copy to $BACKUP_OFFSITE_TARGET failed"
    return 1
  fi
}

case "${1:-loop}" in
  once)
    copy
    exit $?
    ;;
  list)
    exec rclone lsl offsitecrypt: --include '/*/*.dump'
    ;;
  fetch)
    [ $# -eq 2 ] || { echo "usage: $0 fetch <db>/<db>-<stamp>.dump > <file>" >&2; exit 2; }
    case "$2" in
      */*.dump) ;;
      *) echo "give <db>/<db>-<stamp>.dump, as list shows it" >&2; exit 2 ;;
    esac
    exec rclone cat "offsitecrypt:$2"
    ;;
  loop) ;;
  *) echo "usage: $0 [once|list|fetch <db>/<file>]" >&2; exit 2 ;;
esac

trap 'log "stopping"; exit 0' TERM INT
while :; do
  copy || log "the health check turns unhealthy if this persists"
  sleep "$((INTERVAL_MINUTES * 60))" &
  wait $!
done
