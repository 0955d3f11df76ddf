"""The parts of bench/relay_compare.py, our relay against Debezium and a naive relay.

bench/relay_compare.py is the program (its docstring says what it measures and how);
this package holds what it runs, one module each:

- common:     paths, versions, sizes, labels, targets, the SQL, the log line
- services:   the Postgres and Kafka it runs on (its own, or the environment's)
- backlog:    the template database producer_lib writes once, its copies, the outbox load
- context:    one run's state: the fresh database and topic each drain gets
- drain:      watching a drain from the topic's end offsets, and what it measured
- audit:      reading a drained topic whole: delivered, lost, duplicates, per-key order
- ours, naive, debezium: one contender each (drain, and latency where measured)
- ceiling:    the database ceilings of both retention modes and the Kafka ceiling, run as
              the programs db_ceiling and kafka_ceiling
- naive_relay, steady_producer: the naive relay's program, and the latency phase's writer
- latency:    offered loads, the receiving consumer, percentiles
- targets:    the pipeline ceilings and the issue's bars, met or missed
- report:     tables, ratios, the docs/benchmarks.md section
- cli:        the command line and one run of it

Topics, processes and CPU sampling are the benches' shared ones (bench/shared/).
"""
