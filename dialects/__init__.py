"""xDSL dialects of xmge: ``tensor`` (MegEngine operators), ``layout`` and ``kernel``."""
