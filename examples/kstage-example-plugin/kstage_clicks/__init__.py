"""kstage-clicks: the ``clicks`` processor plugin for kstage (clickstream -> stg_clicks)."""

from __future__ import annotations

from kstage_clicks.processor import ClicksOptions, ClicksProcessor

__all__ = ["ClicksOptions", "ClicksProcessor"]
