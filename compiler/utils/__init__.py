"""MegEngine's ``megengine.utils``: graph tools over ``.mge`` files (``network``, ``network_node``,
``comp_graph_tools``)."""
