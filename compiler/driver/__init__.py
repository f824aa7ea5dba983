"""The compiler driver, kept apart from the MegEngine API in the rest of ``compiler``: ``compile()``
and the compiled model (:mod:`compiler.driver.compile`), target parsing for users
(:mod:`compiler.driver.targets`), and the command-line tools ``xmge`` (:mod:`compiler.driver.cli`),
``xmge-opt`` (:mod:`compiler.driver.opt`) and the demo (:mod:`compiler.driver.demo`).

The MegEngine API modules never import the driver (``tests/test_layering.py``), except ``compiler.lite``,
which compiles a loaded model for a target on request; the driver imports the API (to trace a
Module) and the lower layers (passes, backends).
"""
