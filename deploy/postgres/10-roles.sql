-- Runs once, when the PostgreSQL volume is first initialised (docker-entrypoint-initdb.d, as the
-- bootstrap superuser). Two roles: the owner runs migrations and owns every table; the service
-- connects as greentwin_app, which may read and write rows but never change the schema.
-- Passwords come from the compose secrets; psql's backquotes read them, so none sits in this file.
\set owner_pw `cat /run/secrets/db_owner_password`
\set app_pw `cat /run/secrets/db_app_password`

CREATE ROLE greentwin_owner LOGIN PASSWORD :'owner_pw';
CREATE ROLE greentwin_app LOGIN PASSWORD :'app_pw';
CREATE DATABASE greentwin OWNER greentwin_owner;
REVOKE ALL ON DATABASE greentwin FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE greentwin TO greentwin_app;

\connect greentwin
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO greentwin_app;
-- Tables the owner creates from now on (every migration) can be read and appended to by the
-- service at once; `greentwin db grant --role greentwin_app` (run after every upgrade) adds
-- UPDATE and DELETE only where the service changes rows (of a decision, only its ack status),
-- never on the audit trail's tables.
ALTER DEFAULT PRIVILEGES FOR ROLE greentwin_owner IN SCHEMA public
    GRANT SELECT, INSERT ON TABLES TO greentwin_app;
ALTER DEFAULT PRIVILEGES FOR ROLE greentwin_owner IN SCHEMA public
    GRANT USAGE, SELECT ON SEQUENCES TO greentwin_app;
