"""The ``agentsessions`` command line: the demo agent, ``chat``, and the operator's verbs.

A distribution of its own, so the library (``pip install agentsessions``) never brings
rich or the demo; ``pip install "agentsessions[cli]"`` adds it. Other distributions add
verbs through the ``agentsessions.cli`` entry point group (`ENTRY_POINT_GROUP`): each
entry point names a ``register(subparsers)`` callable, and its name is the verb.
"""

from ._common import (
    EXIT_AUTHENTICATION,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NO_DATABASE,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
)
from ._demo import DemoAgent
from ._main import ENTRY_POINT_GROUP, build_parser, main
from ._version import __version__

__all__ = [
    "ENTRY_POINT_GROUP",
    "EXIT_AUTHENTICATION",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_NO_DATABASE",
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "DemoAgent",
    "__version__",
    "build_parser",
    "main",
]
