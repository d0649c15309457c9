"""The PostgreSQL database backend: Django's, with a connection pool that tells an outage
from a busy pool (:mod:`common.db_backend.pool`)."""
