"""Every notebook in notebooks/ runs end to end under nbclient, and its outputs match the
ones saved in the file (addresses, durations, shares and throughputs masked, the widths of
table rules and padding, as `quasi test` masks them, and `:ptx`'s ptxas line). A cell whose
metadata says `"quasi": {"varies": true}` shows what timing decides (an autotune's ranking and
winner, the timeline of the fastest): its outputs must be of the saved kinds and MIME types.

A notebook whose metadata says `"quasi": {"requires": ["cuda-device"]}` runs only where there is a
CUDA device (it is skipped elsewhere, with the reason); where its outputs were never saved (made
without a device), every cell must run without an error and its last cell must print `0 : int`.

`python tests/jupyter/test_notebooks.py` re-executes the notebooks and saves their outputs."""

import atexit
import copy
import ctypes
import difflib
import json
import os
import pathlib
import re
import shutil
import sys
import tempfile

import nbformat
import pytest
from nbclient import NotebookClient

# The kernels these tests start keep autotune results in a tuning cache of this run's own: an
# autotune is timed, whatever an earlier run (or the user) measured, as the saved outputs were.
os.environ["QUASI_TUNE_CACHE"] = tempfile.mkdtemp(prefix="quasi-tune-")
atexit.register(shutil.rmtree, os.environ["QUASI_TUNE_CACHE"], True)

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

ADDRESS = re.compile(r"0x[0-9a-f]+")
DURATION = re.compile(r"\b\d+(\.\d+)?\s?(ns|µs|us|ms|s)\b")
# `:ptx`'s last line depends on whether and which ptxas is installed.
PTXAS = re.compile(r'"ptxas[ :][^"\n]*"')
SHARE = re.compile(r"\b\d+(\.\d+)?\s?%")
THROUGHPUT = re.compile(r"\b\d+(\.\d+)?\s?[KMGT]?(B|FLOP)/s\b")
# A table's rules and padding grow with its widest cell (a timing table's, with its times).
RULE = re.compile(r"([─━═=\-+┼┬┴├┤])[─━═=\-+┼┬┴├┤]{2,}")
SPACES = re.compile(r"[ \t]+")
# Timing rows of functions promoted by tiered compilation: which cell's boundary a background
# compile ends at depends on timing (text tables and HTML rows).
PROMOTED = re.compile(
    r"│ promoted \S+ \(opt \d in the background[^│]*│(\\n)?"  # a text table's row
    r"|<tr><td[^>]*>promoted \S+ \(opt \d in the background.*?</tr>"  # an HTML row
    r"|promoted \S+ \(opt \d in the background[^)]*\)\s*\d+(\.\d+)?\s?(ns|µs|us|ms|s)\s*-"  # a page's text
)
# A bench or autotune chart is drawn from the measured times: its shape changes every run.
SVG = re.compile(r"<svg[\s\S]*?</svg>")
# A timeline's bars in text (`:timeline`): where they start and end is timing.
BARS = re.compile(r"[─■▒█ ]*[■▒█][─■▒█ ]*")


def cuda_device():
    """Why there is no CUDA device here, or None when there is one (the driver's own answer)."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        return f"no CUDA driver ({error})"
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return "the CUDA driver finds no device"
    return None


def unmet_requirement(notebook, path):
    """Why this notebook cannot run here (its metadata's `quasi.requires`), or None."""
    if "cuda-device" in notebook.metadata.get("quasi", {}).get("requires", []):
        reason = cuda_device()
        if reason:
            return f"{path.name} needs a CUDA device: {reason}"
    return None


def varies(cell):
    """Whether a cell's outputs depend on timing beyond what `mask` hides."""
    return bool(cell.get("metadata", {}).get("quasi", {}).get("varies"))


def kinds(output):
    """What a varying output must keep: its type and MIME types."""
    return json.dumps([output.get("output_type"), sorted(output.get("data", {}))])


def has_saved_outputs(notebook):
    return any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")


def execute(notebook):
    """Runs every cell in a fresh kernel (the one the notebook names), errors included: a tour
    shows errors on purpose."""
    executed = copy.deepcopy(notebook)
    # No timestamps in cell metadata: the saved file changes only when outputs do.
    NotebookClient(executed, timeout=120, allow_errors=True, record_timing=False, resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    return executed


def mask(text):
    text = BARS.sub("<bars>", PROMOTED.sub("", text))
    text = PTXAS.sub('"ptxas <resources>"', text)
    text = ADDRESS.sub("0x<address>", SVG.sub("<svg/>", text))
    text = SHARE.sub("<share>", THROUGHPUT.sub("<throughput>", DURATION.sub("<duration>", text)))
    return SPACES.sub(" ", RULE.sub(r"\1", text))


def progress(output):
    """Whether an output is a progress display (an autotune's, updated in place while it ran):
    whether a cell shows one depends on how long it ran, so it is not compared."""
    return bool(output.get("metadata", {}).get("quasi", {}).get("progress"))


def comparable(output):
    """An output as text, without what legitimately changes between runs."""
    kept = {key: value for key, value in output.items() if key not in ("metadata", "transient")}
    return mask(json.dumps(kept, sort_keys=True, indent=1, ensure_ascii=False))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.name for path in NOTEBOOKS])
def test_notebook_outputs_match(path):
    saved = nbformat.read(path, as_version=4)
    reason = unmet_requirement(saved, path)
    if reason:
        pytest.skip(reason)
    if not has_saved_outputs(saved):
        # Made without a device, so nothing saved to compare with yet (see the module's comment).
        executed = execute(saved)
        code = [cell for cell in executed.cells if cell.cell_type == "code"]
        errors = [(cell.source, output) for cell in code for output in cell.outputs if output.output_type == "error"]
        assert not errors, f"{path.name}: cells failed: {errors}"
        last = json.dumps(code[-1].outputs)
        assert "0 : int" in last, f"{path.name}: the last cell printed {last}"
        return
    executed = execute(saved)
    for index, (expected, actual) in enumerate(zip(saved.cells, executed.cells)):
        if expected.cell_type != "code":
            continue
        compare = kinds if varies(expected) else comparable
        expected_outputs = [compare(output) for output in expected.outputs if not progress(output)]
        actual_outputs = [compare(output) for output in actual.outputs if not progress(output)]
        if actual_outputs != expected_outputs:
            diff = "\n".join(difflib.unified_diff("\n".join(expected_outputs).splitlines(), "\n".join(actual_outputs).splitlines(), "saved", "now", lineterm=""))
            pytest.fail(f"{path.name}, cell {index}:\n{expected.source}\n{diff}\n(after an intended change: python tests/jupyter/test_notebooks.py re-saves the outputs)")
        assert actual.execution_count == expected.execution_count, f"{path.name}, cell {index}"


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ has no notebooks"


if __name__ == "__main__":
    for path in sys.argv[1:] and [pathlib.Path(arg) for arg in sys.argv[1:]] or NOTEBOOKS:
        notebook = execute(nbformat.read(path, as_version=4))
        nbformat.write(notebook, path)
        print(f"saved the outputs of {path}")
