"""An actor class that only holds the resources Ray gave it, for tests that fill a node.

It lives in a module of its own, which imports nothing: an actor's process imports the module
that defines its class, and a test module would cost it a torch import (3 CPU-s here)."""


class Blocker:
    """An actor that only holds the resources it asked for."""
