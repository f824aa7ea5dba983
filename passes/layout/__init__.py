"""Layout passes: one per MegEngine layout option, and ``padding-channel`` (spec B.4-B.6)."""

from passes.layout.nchwxx import EnableNchw44DotPass, EnableNchw44Pass, EnableNchw88Pass
from passes.layout.padding import PaddingChannelPass

LAYOUT_PASSES = (
    PaddingChannelPass,
    EnableNchw44Pass,
    EnableNchw88Pass,
    EnableNchw44DotPass,
)

__all__ = [
    "LAYOUT_PASSES",
    "EnableNchw44DotPass",
    "EnableNchw44Pass",
    "EnableNchw88Pass",
    "PaddingChannelPass",
]
