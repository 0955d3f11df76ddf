"""`python -m examples.django_orders.manage run_shipping`: the shipping consumer until
SIGTERM or SIGINT, with Django set up as for any management command."""

from __future__ import annotations

import asyncio
from typing import Any

from django.core.management.base import BaseCommand

from consumer_lib import run_consumer
from examples.django_orders.orders.consumers import build_consumers


class Command(BaseCommand):
    help = "Book a shipment for each placed order (consumes OrderPlaced until SIGTERM)."

    def handle(self, *args: Any, **options: Any) -> None:
        consumer = asyncio.run(run_consumer(build_consumers()))
        self.stdout.write(f"shipping consumer stopped: {consumer.stats}")
