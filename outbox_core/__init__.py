"""The shared core that producer_lib, relay and consumer_lib stand on (none imports another).

It holds what more than one of them needs: the SQL registry and its .sql files (queries),
the migrations (migrate), database URLs and dialects (database_url), executors that run
named statements with sync and async twins (executors, pg_pool, sqlite_thread), the one
translation of driver errors (driver_errors) into the one error root (errors), parameter
encoding per dialect (codec), Kafka security options (kafka_security), the ops HTTP
endpoint (ops_http), log redaction (logs), nested settings with flat names (settings),
the daemons' loop supervisor (supervisor), sharding, and the schema as SQLAlchemy tables.
"""
