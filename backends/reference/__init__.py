"""The reference backend: the numpy interpreter of :mod:`semantics` run as a target."""
