"""The C backends: templates (``backends.c.templates``), the emitter with per-target subclasses
(``backends.c.emitter``), the runtime sources (``runtime/``) and the cached gcc build and loader
(``backends.c.build``)."""
