"""Examples that run against the project's packages (the compose demo)."""
