"""A FastAPI service on SQLAlchemy async and asyncpg that emits an event with each order and
consumes its own events in the application's lifespan."""
