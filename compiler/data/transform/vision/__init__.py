from compiler.data.transform.vision.transform import *  # noqa: F403
from compiler.data.transform.vision.transform import __all__  # noqa: F401
