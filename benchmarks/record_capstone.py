"""Run chapter 6's solution notebook on a GPU and keep what its timing cell measured: the capstone attention kernel
against torch's scaled_dot_product_attention, as the record the chapter shows on a CPU.

    python benchmarks/record_capstone.py benchmarks/records/h200-capstone-attention.json   # on the GPU machine
"""
import datetime
import json
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "solutions" / "06_half_precision_and_attention.ipynb"
DUMP = """
import json, torch, triton
json.dump({"timed": timed, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": triton.__version__, "cuda": torch.version.cuda}, open({path!r}, "w"))
"""


def main(out: str) -> int:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    raw = Path(out).with_suffix(".raw.json")
    nb.cells.append(nbformat.v4.new_code_cell(DUMP.replace("{path!r}", repr(str(raw)))))
    start = time.time()
    NotebookClient(nb, kernel_name="python3", timeout=600, resources={"metadata": {"path": str(NOTEBOOK.parent)}}
                   ).execute()
    got = json.loads(raw.read_text())
    record = {"meta": {"device": got["device"], "torch": got["torch"], "triton": got["triton"], "cuda": got["cuda"],
                       "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
                       "command": f"python benchmarks/record_capstone.py {out}",
                       "what": "chapter 6's timing cell (triton.testing.do_bench, median of its runs), the solution's "
                               "kernel after it matched SDPA (atol 2e-3, rtol 2e-2), fp16",
                       "notebook_seconds": round(time.time() - start, 1)},
              "records": got["timed"]}
    Path(out).write_text(json.dumps(record, indent=1) + "\n")
    raw.unlink()
    for r in record["records"]:
        print(r)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
