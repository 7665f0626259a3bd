"""API users, passwords, tokens and login throttling; FastAPI wiring lives in ``app.api``.

:mod:`app.auth.roles` names the roles, :mod:`app.auth.passwords` hashes (Argon2id),
:mod:`app.auth.tokens` signs expiring tokens, :mod:`app.auth.throttle` throttles failed logins
(counted by :mod:`app.auth.ratelimit`) and :mod:`app.auth.lockout` keeps and lifts account locks,
:mod:`app.auth.users` stores accounts and :mod:`app.auth.service` puts them together into login,
token checks and logout.
"""
