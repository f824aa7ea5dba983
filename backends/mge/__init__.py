"""MegEngine ``.mge`` files: read, lower, write, verify.

The operator table is imported first: rows may declare their own param tables, which it adds to
``schema.PARAMS`` before the container, the serialiser or the verifier reads that table.
"""

from backends.mge import oprs as _oprs  # noqa: F401
