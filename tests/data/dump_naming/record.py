"""Records the operator and var names MegEngine 1.13 gives the dumps of tests/mge_naming_cases.py
(run with MegEngine's Python: ``/work/shared/tools/megengine-oracle/mgepy
tests/data/dump_naming/record.py``); writes names.json next to this file."""

import json
import os
import sys

import megengine as mge

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from mge_naming_cases import dumped_names  # noqa: E402

names = dumped_names(mge)
with open(os.path.join(HERE, "names.json.tmp"), "w") as f:
    json.dump(names, f, indent=1)
os.replace(os.path.join(HERE, "names.json.tmp"), os.path.join(HERE, "names.json"))
print(f"{len(names)} cases")
