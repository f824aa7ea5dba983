"""Records what real MegEngine 1.13 computes on xmge's edited dumps (run from the repository root):

    PYTHONPATH=$PWD .venv/bin/python tests/data/network_edits/record.py dump /tmp/edits
    /work/shared/tools/megengine-oracle/mgepy tests/data/network_edits/record.py run /tmp/edits

``dump`` writes each edit of tests/network_edits.py with xmge; ``run`` loads each file with
megenginelite (MegEngine's deployment runtime) and writes ``<edit>.npz`` here: inputs under
``in:<name>``, outputs under their names."""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN_INPUTS = os.path.join(HERE, "..", "..", "..", "..", "shared", "golden", "multi_io", "inputs.npz")


def dump(folder: str) -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
    from tests.network_edits import EDITS, edited

    os.makedirs(folder, exist_ok=True)
    for name in EDITS:
        edited(name, os.path.join(folder, name + ".mge"))


def run(folder: str) -> None:
    from megenginelite import LiteNetwork

    golden = dict(np.load(GOLDEN_INPUTS))
    for file in sorted(os.listdir(folder)):
        net = LiteNetwork()
        net.load(os.path.join(folder, file))
        record = {}
        for name in net.get_all_input_name():
            value = golden[name.split(".")[-1]]
            net.get_io_tensor(name).set_data_by_copy(value)
            record["in:" + name] = value
        net.forward()
        net.wait()
        for name in net.get_all_output_name():
            record[name] = net.get_io_tensor(name).to_numpy().copy()
        np.savez(os.path.join(HERE, file[: -len(".mge")] + ".npz"), **record)
        print(file, sorted(k for k in record if not k.startswith("in:")))


if __name__ == "__main__":
    {"dump": dump, "run": run}[sys.argv[1]](sys.argv[2])
