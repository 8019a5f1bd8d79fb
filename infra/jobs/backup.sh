#!/bin/sh
# Database backup loop of the stack's backup container (postgres image, so pg_dump matches the servers).
#
# Every BACKUP_INTERVAL_HOURS it writes a custom-format dump (pg_restore-able) of each database to
# BACKUP_DIR/<name>/<name>-<UTC timestamp>.dump, first under a .partial name, renamed only when pg_dump
# succeeded, so a half-written file never looks like a backup. Dumps older than BACKUP_RETENTION_DAYS
# are deleted, never the newest one. BACKUP_DIR/last-success holds the time of the last complete round;
# the container's health check fails when it is older than two intervals.
#
# Databases: BACKUP_DATABASES="name=host:port:db:user ..." with the password of each in the variable
# PGPASSWORD_<NAME> (upper-case). BACKUP_ONCE=1 runs one round and exits (restore drills, tests).
# Exit codes: 0 ok, 1 a dump failed (BACKUP_ONCE only), 2 usage.
set -eu

BACKUP_DIR=${BACKUP_DIR:-/backups}
BACKUP_INTERVAL_HOURS=${BACKUP_INTERVAL_HOURS:-24}
BACKUP_RETENTION_DAYS=${BACKUP_RETENTION_DAYS:-14}
: "${BACKUP_DATABASES:?BACKUP_DATABASES is required, e.g. features=features-db:5432:features:postgres}"

case "$BACKUP_INTERVAL_HOURS$BACKUP_RETENTION_DAYS" in
  *[!0-9]*) echo "BACKUP_INTERVAL_HOURS and BACKUP_RETENTION_DAYS must be whole numbers" >&2; exit 2 ;;
esac

log() { printf '%s backup: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"; }

dump_one() {
  name=$1 host=$2 port=$3 db=$4 user=$5
  upper=$(printf '%s' "$name" | tr '[:lower:]-' '[:upper:]_')
  eval "password=\${PGPASSWORD_${upper}:-}"
  if [ -z "$password" ]; then log "no PGPASSWORD_${upper} for $name"; return 1; fi
  mkdir -p "$BACKUP_DIR/$name"
  stamp=$(date -u +%Y%m%dT%H%M%SZ)
  target="$BACKUP_DIR/$name/$name-$stamp.dump"
  if PGPASSWORD=$password pg_dump --host "$host" --port "$port" --username "$user" --dbname "$db" \
      --format custom --compress 6 --no-password --file "$target.partial"; then
    mv "$target.partial" "$target"
    log "wrote $target ($(wc -c < "$target") bytes)"
  else
    rm -f "$target.partial"
    log "pg_dump of $name failed"
    return 1
  fi
  # Retention: delete old dumps, but always keep the newest one even if it is old.
  # File names carry a UTC timestamp, so the lexical order is the chronological one.
  newest=$(find "$BACKUP_DIR/$name" -name '*.dump' -type f | sort | tail -n 1)
  find "$BACKUP_DIR/$name" -name '*.dump' -type f -mtime +"$BACKUP_RETENTION_DAYS" | while read -r old; do
    [ "$old" = "$newest" ] || { rm -f "$old"; log "pruned $old"; }
  done
}

round() {
  failed=0
  for spec in $BACKUP_DATABASES; do
    name=${spec%%=*}
    rest=${spec#*=}
    old_ifs=$IFS; IFS=:
    # shellcheck disable=SC2086 # deliberate split of host:port:db:user
    set -- $rest
    IFS=$old_ifs
    if [ $# -ne 4 ]; then log "bad database spec: $spec"; failed=1; continue; fi
    dump_one "$name" "$1" "$2" "$3" "$4" || failed=1
  done
  if [ "$failed" -eq 0 ]; then date -u +%s > "$BACKUP_DIR/last-success"; fi
  return "$failed"
}

if [ "${BACKUP_ONCE:-0}" = 1 ]; then
  round
  exit $?
fi

trap 'log "stopping"; exit 0' TERM INT
while :; do
  round || log "round finished with failures; the health check turns unhealthy if this persists"
  sleep "$((BACKUP_INTERVAL_HOURS * 3600))" &
  wait $!
done
