"""A small model zoo defined with xmge's own API, and ``megengine.hub``'s functions to reach it
(:mod:`compiler.hub.hub`): ``hub.load("megengine/models", "resnet18")``, ``@hub.pretrained(url)``."""

from compiler.hub.hub import (
    ENV_HUB_DIR,
    HubError,
    PretrainedWeightsNotFound,
    get_hub_dir,
    help,
    import_module,
    list,
    load,
    load_serialized_obj_from_url,
    pretrained,
)

__all__ = [
    "ENV_HUB_DIR",
    "HubError",
    "PretrainedWeightsNotFound",
    "get_hub_dir",
    "help",
    "import_module",
    "list",
    "load",
    "load_serialized_obj_from_url",
    "pretrained",
]
