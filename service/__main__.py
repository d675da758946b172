"""``python -m service`` runs the kstage command line."""

from service.cli import entry

entry()
