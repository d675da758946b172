"""The process shell of kstage: CLI, lifecycle, signals, logging, embedded broker."""

from service.broker import EmbeddedBroker
from service.errors import BrokerError, ServiceError

__all__ = ["BrokerError", "EmbeddedBroker", "ServiceError"]
