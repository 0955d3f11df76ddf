"""Settings of the example project; the database comes from DATABASE_URL
(postgresql://user:password@host:port/name)."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit


def _database(url: str) -> dict[str, object]:
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(f"DATABASE_URL must be a postgresql:// URL, not {parts.scheme}://")
    return {
        # Runs on psycopg 3 when it is installed, on psycopg2 otherwise (Django's choice).
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        # The consumer's worker threads keep their connections between transactions,
        # checked before each one (Django's default, 0, would connect for every batch).
        "CONN_MAX_AGE": 600,
        "CONN_HEALTH_CHECKS": True,
    }


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = False
ALLOWED_HOSTS: list[str] = []
INSTALLED_APPS = ["django.contrib.contenttypes", "examples.django_orders.orders"]
DATABASES = {"default": _database(os.environ["DATABASE_URL"])}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"

ORDERS_TOPIC = os.environ.get("ORDERS_TOPIC", "orders")
KAFKA_BOOTSTRAP_SERVERS = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
SHIPPING_GROUP = os.environ.get("CONSUMER_GROUP", "django-orders-shipping")
