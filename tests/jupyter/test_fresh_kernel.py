"""Cases that need a kernel of their own, so that what they count is theirs: `:save FILE` (the
kernel writes every cell it executed, failures included, as a transcript `quasi test` passes at
once), inspection and completion that run no cell, and aborted cells that are not numbered."""

import contextlib
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
    reply = shell_reply(client, msg_id)
    shown = []
    while True:
        message = client.get_iopub_msg(timeout=TIMEOUT)
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        if message["msg_type"] == "display_data":
            shown.append(message["content"]["data"]["text/plain"])
        if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
            return reply, shown


@contextlib.contextmanager
def fresh_kernel():
    manager, client = start_new_kernel(kernel_name=KERNEL_NAME)
    try:
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def shell_reply(client, msg_id):
    reply = client.get_shell_msg(timeout=TIMEOUT)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = client.get_shell_msg(timeout=TIMEOUT)
    return reply


def test_inspect_and_complete_run_no_cell():
    with fresh_kernel() as client:
        run_cell(client, "(define ((sq int) (x int)) (ret (mul x x)))")
        inspected = shell_reply(client, client.inspect("(call sq 2)", cursor_pos=7))
        assert inspected["content"]["found"]
        assert inspected["content"]["data"]["text/plain"] == "sq : (int) -> int"
        completed = shell_reply(client, client.complete("(call s", cursor_pos=7))["content"]
        assert "sq" in completed["matches"]
        types = {item["text"]: item for item in completed["metadata"]["_jupyter_types_experimental"]}
        assert types["sq"]["type"] == "function"
        assert types["sq"]["signature"] == "(int) -> int"
        assert types["sub"]["type"] == "keyword"
        assert (types["sq"]["start"], types["sq"]["end"]) == (completed["cursor_start"], completed["cursor_end"])
        # Neither consumed a cell: the next cell is cell 2 in diagnostics, as its prompt is [2].
        reply, _ = run_cell(client, "(call sq 1.5)")
        assert reply["content"]["execution_count"] == 2
        assert "cell 2:1:" in "\n".join(reply["content"]["traceback"])


def test_aborted_cells_get_no_count():
    with fresh_kernel() as client:
        failing = client.execute("(add 1 2.5)")
        queued = client.execute("(add 1 1)")
        assert shell_reply(client, failing)["content"]["execution_count"] == 1
        aborted = shell_reply(client, queued)["content"]
        assert aborted["status"] == "aborted"
        assert "execution_count" not in aborted
        reply, _ = run_cell(client, "(add 2 2)")
        assert reply["content"]["execution_count"] == 2


def test_save_writes_a_transcript_that_quasi_test_passes(tmp_path):
    with fresh_kernel() as client:
        run_cell(client, "(define ((cube int) (x int)) (ret (mul x (mul x x))))")
        run_cell(client, "(call cube 3)")
        reply, _ = run_cell(client, "(call cube 1.5)")
        assert reply["content"]["status"] == "error"
        path = tmp_path / "notebook.repl"
        reply, shown = run_cell(client, f":save {path}")
        assert reply["content"]["status"] == "ok"
        assert shown == [f"saved 3 cells to {path}"]
    text = path.read_text()
    assert "> (call cube 3)\n27 : int\n" in text
    assert "> (call cube 1.5)\nerror[type]" in text
    checked = subprocess.run([str(QUASI), "test", str(path)], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.endswith("1 passed, 0 failed\n"), checked.stdout


def test_save_without_a_file_name_is_an_error():
    with fresh_kernel() as client:
        reply, _ = run_cell(client, ":save")
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "error[syntax]"
