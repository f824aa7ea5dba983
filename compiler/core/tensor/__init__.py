"""MegEngine's ``megengine.core.tensor`` paths that user code imports (``dtype``)."""
