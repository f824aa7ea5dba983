"""Layout passes: one per MegEngine layout option, and ``padding-channel`` (spec B.4-B.6)."""

from passes.layout.hwcd4 import EnableHwcd4Pass
from passes.layout.nchw4 import EnableChwn4Pass, EnableNchw4Pass, EnableNchw32Pass, EnableNchw64Pass
from passes.layout.nchwxx import EnableNchw44DotPass, EnableNchw44Pass, EnableNchw88Pass
from passes.layout.padding import PaddingChannelPass
from passes.layout.relayout_back import RelayoutBackPass

LAYOUT_PASSES = (
    PaddingChannelPass,
    EnableNchw44Pass,
    EnableNchw88Pass,
    EnableNchw44DotPass,
    EnableNchw4Pass,
    EnableNchw32Pass,
    EnableChwn4Pass,
    EnableNchw64Pass,
    EnableHwcd4Pass,
    RelayoutBackPass,
)

__all__ = [
    "LAYOUT_PASSES",
    "EnableChwn4Pass",
    "EnableHwcd4Pass",
    "EnableNchw4Pass",
    "EnableNchw32Pass",
    "EnableNchw44DotPass",
    "EnableNchw44Pass",
    "EnableNchw64Pass",
    "EnableNchw88Pass",
    "PaddingChannelPass",
    "RelayoutBackPass",
]
