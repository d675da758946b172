"""Errors of the process shell.

Tree::

    ServiceError         root
    └── BrokerError      the embedded broker could not start
"""

from __future__ import annotations


class ServiceError(Exception):
    """Root of the service-layer errors."""

    retriable = False


class BrokerError(ServiceError):
    """The embedded broker binary is missing or did not start listening."""
