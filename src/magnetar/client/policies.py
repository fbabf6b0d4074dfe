"""Consumer policy objects with the official client's names: dead-letter and batch receive."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ConsumerDeadLetterPolicy:
    """After ``max_redeliver_count`` redeliveries a message goes to ``dead_letter_topic``
    (default ``<topic>-<subscription>-DLQ``)."""

    max_redeliver_count: int
    dead_letter_topic: str | None = None
    initial_subscription_name: str | None = None

    def __post_init__(self) -> None:
        if self.max_redeliver_count is None or self.max_redeliver_count < 1:
            raise ValueError("max_redeliver_count must be greater than 0")


@dataclass
class ConsumerBatchReceivePolicy:
    """``batch_receive`` returns once any limit is hit (-1 / 0 means no limit)."""

    max_num_message: int = -1
    max_num_bytes: int = 10 * 1024 * 1024
    timeout_ms: int = 100
