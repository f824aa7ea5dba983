# lit configuration: `lit -v tests/filecheck` runs every RUN line through the installed xmge-opt.
# tests/filecheck/runner.py runs the same RUN lines in-process for pytest.
import os
import sys

import lit.formats

config.name = "xmge"  # noqa: F821
config.test_format = lit.formats.ShTest(execute_external=False)  # noqa: F821
config.suffixes = [".mlir"]  # noqa: F821
config.test_source_root = os.path.dirname(__file__)  # noqa: F821
config.environment["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]  # noqa: F821
