"""The root of the errors xmge reports to users.

It lives in the lowest layer so that every layer's errors (the dialects' shape inference, the
.mge and ONNX readers, the backends, the MegEngine API) can share one base class that callers
catch, without a lower layer importing the user API.
"""


class XmgeError(Exception):
    """Base class of the errors xmge reports to users."""


class AssertEqualError(XmgeError, RuntimeError):
    """An AssertEqual check (a load_and_run test case's, or ``F.utils._assert_equal``) found the
    values apart by more than its ``maxerr``. A RuntimeError, as MegEngine's."""


__all__ = ["AssertEqualError", "XmgeError"]
