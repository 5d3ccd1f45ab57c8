#!/usr/bin/env bash
# Run once by the postgres image when its data volume is first made (it runs
# every script in /docker-entrypoint-initdb.d as the superuser): the role
# Tether connects as, which is not a superuser and owns the database
# `tether` and nothing else. A leaked DATABASE_URL then gives Tether's own
# schema, not the whole server.
set -euo pipefail
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
	-v pw="${TETHER_DB_PASSWORD:?set TETHER_DB_PASSWORD}" <<'SQL'
CREATE ROLE tether LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'pw';
CREATE DATABASE tether OWNER tether;
SQL
