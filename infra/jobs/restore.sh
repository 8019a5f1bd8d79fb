#!/bin/sh
# Restores one database of the stack from a dump of infra/jobs/backup.sh; run inside the backup
# container (docs/infra.md "Backups and restore"), which holds the connection specs and passwords:
#
#   /jobs/restore.sh <name> latest                  the newest dump of <name> in BACKUP_DIR/<name>/
#   /jobs/restore.sh <name> <name>-<stamp>.dump     that dump (a file in BACKUP_DIR/<name>/)
#
# <name> is one of BACKUP_DATABASES ("name=host:port:db:user ..."), its password in PGPASSWORD_<NAME>.
# The dump replaces the database's contents in ONE transaction (pg_restore --clean --if-exists
# --single-transaction --exit-on-error): a failure leaves the database as it was. Owners and grants
# come back as dumped (no --no-owner): the roles must exist, which the stack's roles jobs ensure
# before anything else. Stop the database's writers first; the script does not.
# Exit codes: 0 restored, 1 the restore failed, 2 usage (unknown name, no such dump).
set -eu

BACKUP_DIR=${BACKUP_DIR:-/backups}

usage() {
  echo "usage: $0 <name> latest|<name>-<stamp>.dump   (names: ${BACKUP_DATABASES:-none configured})" >&2
  exit 2
}

[ $# -eq 2 ] || usage
name=$1
which=$2
: "${BACKUP_DATABASES:?BACKUP_DATABASES is required, e.g. features=features-db:5432:features:postgres}"

spec=
for entry in $BACKUP_DATABASES; do
  [ "${entry%%=*}" = "$name" ] && spec=${entry#*=}
done
[ -n "$spec" ] || { echo "no database named '$name' in BACKUP_DATABASES" >&2; usage; }
old_ifs=$IFS; IFS=:
# shellcheck disable=SC2086 # deliberate split of host:port:db:user
set -- $spec
IFS=$old_ifs
[ $# -eq 4 ] || { echo "bad database spec: $spec" >&2; exit 2; }
host=$1 port=$2 db=$3 user=$4

if [ "$which" = latest ]; then
  # File names carry a UTC timestamp, so the lexical order is the chronological one.
  dump=$(find "$BACKUP_DIR/$name" -maxdepth 1 -name "$name-*.dump" -type f 2>/dev/null | sort | tail -n 1)
else
  case "$which" in
    */*|.*) echo "give the dump's file name, not a path: $which" >&2; exit 2 ;;
  esac
  dump=$BACKUP_DIR/$name/$which
fi
if [ -z "$dump" ] || [ ! -f "$dump" ]; then
  echo "no dump '$which' of $name in $BACKUP_DIR/$name" >&2
  exit 2
fi

upper=$(printf '%s' "$name" | tr '[:lower:]-' '[:upper:]_')
eval "password=\${PGPASSWORD_${upper}:-}"
[ -n "$password" ] || { echo "no PGPASSWORD_${upper} for $name" >&2; exit 2; }

echo "restoring $db on $host:$port from $dump"
if PGPASSWORD=$password pg_restore --host "$host" --port "$port" --username "$user" --no-password \
    --dbname "$db" --clean --if-exists --single-transaction --exit-on-error "$dump"; then
  echo "restored $db from $(basename "$dump")"
else
  echo "restore of $db failed; the database is unchanged" >&2
  exit 1
fi
