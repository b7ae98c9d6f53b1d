"""The options and output conventions every subcommand shares (not a subcommand: no HELP).

``--json``: the command's result as one JSON document on stdout, nothing else there (messages, warnings and
progress go to stderr), so automation can parse it whatever the command printed meanwhile. ``--no-progress``
(commands that draw a progress bar): no bar, even on a terminal; without it the bar appears only when stderr
is a terminal. ``test/cli/test_cli_options.py`` walks the parser and checks every working subcommand has them.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_json(parser: argparse.ArgumentParser, help: str = "print the result as JSON (messages on stderr)"
             ) -> None:
    parser.add_argument("--json", action="store_true", help=help)


def add_no_progress(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar (default: one on stderr when it is a terminal)")


def progress(args: argparse.Namespace) -> bool | None:
    """The ``progress`` argument of the bag and download functions: False under ``--no-progress``, else None
    (a bar only when stderr is a terminal)."""
    return False if getattr(args, "no_progress", False) else None


def print_json(document: Any) -> None:
    """``document`` on stdout as indented JSON (paths and other objects as their text)."""
    json.dump(document, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def say(text: str) -> None:
    """A message for the user: on stderr, so stdout holds only the result."""
    print(text, file=sys.stderr)
