#!/bin/sh
# Ensures the Kratos, Hydra and login-app databases on the identity PostgreSQL: one database and one
# login role each, none able to connect to another's database (the login app keeps only its rate-limit
# counters in its own, docs/identity.md "Rate limits and replicas"). Idempotent (run on every
# `pulumi up` whose inputs changed), so a rotated password takes effect on the next run.
#
# Connection: PGHOST, PGPORT, PGUSER (superuser), PGPASSWORD from the environment.
# Passwords:  KRATOS_DB_PASSWORD, HYDRA_DB_PASSWORD, LOGIN_DB_PASSWORD. Exit codes: 0 ok, 1 failure.
set -eu

: "${KRATOS_DB_PASSWORD:?KRATOS_DB_PASSWORD is required}"
: "${HYDRA_DB_PASSWORD:?HYDRA_DB_PASSWORD is required}"
: "${LOGIN_DB_PASSWORD:?LOGIN_DB_PASSWORD is required}"

psql -v ON_ERROR_STOP=1 --no-psqlrc --quiet --dbname postgres \
  -v kratos_password="$KRATOS_DB_PASSWORD" \
  -v hydra_password="$HYDRA_DB_PASSWORD" \
  -v login_password="$LOGIN_DB_PASSWORD" <<'SQL'
SELECT 'CREATE ROLE kratos LOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'kratos') \gexec
SELECT 'CREATE ROLE hydra LOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'hydra') \gexec
SELECT 'CREATE ROLE login LOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'login') \gexec
ALTER ROLE kratos WITH LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB PASSWORD :'kratos_password';
ALTER ROLE hydra WITH LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB PASSWORD :'hydra_password';
ALTER ROLE login WITH LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB PASSWORD :'login_password';
SELECT 'CREATE DATABASE kratos OWNER kratos' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'kratos') \gexec
SELECT 'CREATE DATABASE hydra OWNER hydra' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'hydra') \gexec
SELECT 'CREATE DATABASE login OWNER login' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'login') \gexec
REVOKE ALL ON DATABASE kratos FROM PUBLIC;
REVOKE ALL ON DATABASE hydra FROM PUBLIC;
REVOKE ALL ON DATABASE login FROM PUBLIC;
GRANT CONNECT ON DATABASE kratos TO kratos;
GRANT CONNECT ON DATABASE hydra TO hydra;
GRANT CONNECT ON DATABASE login TO login;
SQL
echo "identity-db roles ensured"
