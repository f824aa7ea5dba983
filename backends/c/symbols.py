"""The symbol prefix of a compiled model: every exported C symbol of its library is ``<prefix>_...``
and the library is ``lib<prefix>.so`` (``backends/c/runtime/xm_api.h``), so several models link into
one program."""

from __future__ import annotations

import re

from dialects.errors import XmgeError

# the prefix of a model compiled without a name (its library: libxmge_model.so)
DEFAULT_PREFIX = "xmge_model"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class PrefixError(XmgeError, ValueError):
    pass


def check_prefix(prefix: str) -> str:
    """``prefix`` if it can name a model's exported C symbols (a C identifier of at most 64
    characters), else a :class:`PrefixError` naming it."""
    if not isinstance(prefix, str) or not _IDENTIFIER.fullmatch(prefix) or len(prefix) > 64:
        raise PrefixError(f"symbol prefix {prefix!r} is not a C identifier of at most 64 characters")
    return prefix


def prefix_from_name(name: str) -> str:
    """A symbol prefix from a model name: lower case, every other character ``_``, a leading digit
    guarded (``ResNet-18`` -> ``resnet_18``, ``3d-unet`` -> ``m_3d_unet``); empty -> the default."""
    p = re.sub(r"[^a-z0-9_]", "_", name.lower()).strip("_")[:64]
    if not p:
        return DEFAULT_PREFIX
    return check_prefix(p if not p[0].isdigit() else f"m_{p}"[:64])


def c_string(text: str) -> str:
    """``text`` as a C string literal that means exactly its UTF-8 bytes, whatever a model file put
    in it: printable ASCII stays as it is (so ordinary names read the same in the source); quotes,
    backslashes, ``?`` (trigraphs) and every other byte become escapes (three-digit octal, so a
    following digit cannot extend one)."""
    out = []
    for byte in text.encode("utf-8", "surrogatepass"):
        ch = chr(byte)
        if ch in '"\\?':
            out.append("\\" + ch)
        elif 0x20 <= byte < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'
