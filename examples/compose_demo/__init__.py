"""The demo that docker-compose.yml runs: producer, consumer and the round-trip check.

Each module is self-contained: in the containers they are imported from /demo (a bind
mount of this folder) as top-level modules.
"""
