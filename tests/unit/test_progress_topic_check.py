"""The progress topic's start-up check against an admin client that, as a broker does for
a moment after the topic is created, does not know the topic yet."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from outbox_core.kafka_security import KafkaSecurity
from relay.transport import progress
from relay.transport.kafka_settings import KafkaSettings
from relay.transport.progress import ProgressTopic, ProgressTopicRefused

UNKNOWN, DENIED = 3, 29


class LateAdmin:
    """Creates the topic, then answers `unknown` (or `code`) `late` times to each
    describe before it answers as a broker that knows the compacted topic."""

    late = 2
    code = UNKNOWN
    made: ClassVar[list[LateAdmin]] = []

    def __init__(self, **_: Any) -> None:
        self.configs_asked = self.topics_asked = 0
        LateAdmin.made.append(self)

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def list_topics(self) -> list[str]:
        return []

    async def describe_cluster(self) -> dict[str, Any]:
        return {"brokers": [{}]}

    async def create_topics(self, topics: list[Any]) -> Any:
        return SimpleNamespace(topic_errors=[(t.name, 0, None) for t in topics])

    async def describe_configs(self, resources: list[Any]) -> list[Any]:
        self.configs_asked += 1
        name = resources[0].name
        if self.configs_asked <= self.late:
            return [SimpleNamespace(resources=[(self.code, "", 2, name, [])])]
        entries = [("cleanup.policy", "compact", False, False, False)]
        return [SimpleNamespace(resources=[(0, "", 2, name, entries)])]

    async def describe_topics(self, topics: list[str]) -> list[dict[str, Any]]:
        self.topics_asked += 1
        if self.topics_asked <= self.late:
            return [{"topic": topics[0], "error_code": UNKNOWN, "partitions": []}]
        return [{"topic": topics[0], "error_code": 0, "partitions": [{"partition": 0}]}]


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> type[LateAdmin]:
    LateAdmin.made = []
    LateAdmin.late, LateAdmin.code = 2, UNKNOWN
    monkeypatch.setattr(progress, "AIOKafkaAdminClient", LateAdmin)
    monkeypatch.setattr(progress, "KNOWN_POLL_S", 0.001)
    return LateAdmin


def topic(timeout_ms: int = 5_000) -> ProgressTopic:
    settings = KafkaSettings(progress_topic="progress", request_timeout_ms=timeout_ms)
    return ProgressTopic(settings, KafkaSecurity.plaintext())


async def test_a_topic_the_broker_does_not_know_yet_is_asked_again(admin: type[LateAdmin]) -> None:
    assert await topic()._ensure() == [0]
    (made,) = admin.made
    assert made.configs_asked == 3
    assert made.topics_asked == 3


@pytest.mark.parametrize(
    ("code", "said"),
    [(DENIED, "needs DescribeConfigs"), (41, "refused to describe it")],
    ids=["denied", "other"],
)
async def test_any_other_refusal_fails_at_once_naming_it(
    admin: type[LateAdmin], code: int, said: str
) -> None:
    admin.code = code
    with pytest.raises(ProgressTopicRefused, match=f"error code {code}\\): .*{said}"):
        await topic()._ensure()
    assert admin.made[0].configs_asked == 1


async def test_a_topic_that_stays_unknown_fails_after_the_request_timeout(
    admin: type[LateAdmin],
) -> None:
    admin.late = 10**9
    with pytest.raises(ProgressTopicRefused, match=r"still unknown to the broker 1 s after"):
        await topic(timeout_ms=1000)._ensure()
