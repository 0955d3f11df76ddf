"""The parts of bench/record_formats.py, the relay's record formats measured and checked.

bench/record_formats.py is the program (its docstring says what it measures and how); this
package holds what it runs, one module each:

- settings:       the formats and the relay settings each one runs with
- debezium_match: the same outbox rows through Debezium's EventRouter and through the
                  relay's debezium format, read back and compared record by record
- drains:         one backlog drained once per format, rounds alternating
- report:         the tables both parts print

The backlog, its drains and their audit are bench/compare's; Debezium's Kafka Connect
is bench/compare/debezium.py's.
"""
