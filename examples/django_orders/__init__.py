"""A Django project that emits an event with each order inside transaction.atomic() and
consumes it with DjangoSync, whose handlers write through the ORM in the transaction that
records the event."""
