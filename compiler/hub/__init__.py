"""A small model zoo defined with xmge's own API, and ``megengine.hub``'s functions to reach it
(:mod:`compiler.hub.hub`): ``hub.load("megengine/models", "resnet18")``, ``@hub.pretrained(url)``."""

from compiler.hub import hub as _hub_api
from compiler.hub.hub import *  # noqa: F403

__all__ = [*_hub_api.__all__]  # not list(): hub.list, star-imported above, shadows it
