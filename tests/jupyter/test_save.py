"""`:save FILE` in a notebook: the kernel writes every cell it executed, failures included, as a
transcript that `quasi test` passes at once. A fresh kernel, so the transcript holds only these
cells."""

import os
import pathlib
import subprocess

from jupyter_client.manager import start_new_kernel

from conftest import KERNEL_NAME, ROOT

TIMEOUT = 30
# The `quasi` binary the test command builds.
QUASI = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug" / "quasi"


def run_cell(client, code):
    """Executes a cell; returns its reply and the display_data texts it published."""
    msg_id = client.execute(code)
    reply = client.get_shell_msg(timeout=TIMEOUT)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = client.get_shell_msg(timeout=TIMEOUT)
    shown = []
    while True:
        message = client.get_iopub_msg(timeout=TIMEOUT)
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        if message["msg_type"] == "display_data":
            shown.append(message["content"]["data"]["text/plain"])
        if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
            return reply, shown


def test_save_writes_a_transcript_that_quasi_test_passes(tmp_path):
    manager, client = start_new_kernel(kernel_name=KERNEL_NAME)
    try:
        run_cell(client, "(define ((cube int) (x int)) (ret (mul x (mul x x))))")
        run_cell(client, "(call cube 3)")
        reply, _ = run_cell(client, "(call cube 1.5)")
        assert reply["content"]["status"] == "error"
        path = tmp_path / "notebook.repl"
        reply, shown = run_cell(client, f":save {path}")
        assert reply["content"]["status"] == "ok"
        assert shown == [f"saved 3 cells to {path}"]
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    text = path.read_text()
    assert "> (call cube 3)\n27 : int\n" in text
    assert "> (call cube 1.5)\nerror[type]" in text
    checked = subprocess.run([str(QUASI), "test", str(path)], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.endswith("1 passed, 0 failed\n"), checked.stdout


def test_save_without_a_file_name_is_an_error():
    manager, client = start_new_kernel(kernel_name=KERNEL_NAME)
    try:
        reply, _ = run_cell(client, ":save")
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "error[syntax]"
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
