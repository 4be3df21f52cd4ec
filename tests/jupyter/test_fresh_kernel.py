"""Cases that need a kernel of their own, so that what they count is theirs: `:save FILE` (the
kernel writes every cell it executed, failures included, as a transcript `quasi test` passes at
once), inspection and completion that run no cell, aborted cells that are not numbered, the
kernelspec `quasi-kernel install --gpu sim` writes (its kernel runs launches in the simulator), and
C headers and libraries (`include`, `load-library`) in a kernel's session."""

import contextlib
import os
import pathlib
import subprocess

import json

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import start_new_kernel

from conftest import KERNEL_NAME, ROOT, kernel_argv

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
def fresh_kernel(kernel_name=KERNEL_NAME, **options):
    manager, client = start_new_kernel(kernel_name=kernel_name, **options)
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
        # After `(call ` only functions complete; elsewhere forms too.
        called = shell_reply(client, client.complete("(call s", cursor_pos=7))["content"]
        assert called["matches"] == ["sq"]
        completed = shell_reply(client, client.complete("(s", cursor_pos=2))["content"]
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


def test_install_gpu_sim_gives_a_simulator_kernel(tmp_path, monkeypatch):
    installed = subprocess.run([kernel_argv()[0], "install", "--prefix", str(tmp_path), "--gpu", "sim"], capture_output=True, text=True, timeout=60)
    assert installed.returncode == 0, installed.stderr
    kernels = tmp_path / "share" / "jupyter" / "kernels"
    # Beside the plain kernel, not instead of it: only `quasi-sim` is written here.
    assert sorted(path.name for path in kernels.iterdir()) == ["quasi-sim"]
    spec = json.loads((kernels / "quasi-sim" / "kernel.json").read_text())
    assert spec["env"] == {"QUASI_GPU": "sim"}
    assert spec["display_name"] == "Quasi (GPU simulator)"
    # Found where Jupyter looks, as `jupyter kernelspec list` would find it.
    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join([str(kernels.parent), os.environ.get("JUPYTER_PATH", "")]))
    assert KernelSpecManager().find_kernel_specs()["quasi-sim"] == str(kernels / "quasi-sim")
    with fresh_kernel("quasi-sim") as client:
        reply, shown = run_cell(client, ":gpu")
        assert reply["content"]["status"] == "ok"
        assert shown == ["GPU: the simulator (launches run on the CPU; accesses and barriers are checked)"]
        run_cell(client, "(define-kernel ((twice void) (p (ptr int) inout n) (n int)) (store (ptradd p (tid.x)) (mul 2 (load (ptradd p (tid.x))))))")
        run_cell(client, "(define-global (xs (arr 3 int)) (const (1 2 3)))")
        reply, _ = run_cell(client, "(launch twice (grid 1) (block 3) (aptradd xs 0) 3)")
        assert reply["content"]["status"] == "ok", reply["content"]
        msg_id = client.execute("xs")
        assert shell_reply(client, msg_id)["content"]["status"] == "ok"
        while True:
            message = client.get_iopub_msg(timeout=TIMEOUT)
            if message["parent_header"].get("msg_id") == msg_id and message["msg_type"] == "execute_result":
                assert message["content"]["data"]["text/plain"] == "[2, 4, 6] : (arr 3 int)"
                break
    # The plain kernel leaves the mode to the environment it starts in: the device by default.
    with fresh_kernel(env={key: value for key, value in os.environ.items() if key != "QUASI_GPU"}) as client:
        _, shown = run_cell(client, ":gpu")
        assert len(shown) == 1 and shown[0].startswith("GPU: the device"), shown


def test_include_and_load_library_work_in_the_kernel():
    with fresh_kernel() as client:
        texts = []

        def keep(message):
            if message["msg_type"] in ("display_data", "execute_result"):
                texts.append(message["content"]["data"]["text/plain"])
            elif message["msg_type"] == "stream":
                texts.append(message["content"]["text"])

        reply = client.execute_interactive('(include "stdio.h" (functions puts))', output_hook=keep, timeout=TIMEOUT)
        assert reply["content"]["status"] == "ok"
        assert any("include stdio.h: 1 function" in text for text in texts), texts
        client.execute_interactive('(call puts "from C")', output_hook=keep, timeout=TIMEOUT)
        assert any("from C" in text for text in texts), texts
        reply = client.execute_interactive('(load-library "libm.so.6")', output_hook=keep, timeout=TIMEOUT)
        assert reply["content"]["status"] == "ok"
        client.execute_interactive("(define ((cbrt double) (x double)))", output_hook=keep, timeout=TIMEOUT)
        assert any("(extern, from libm.so.6)" in text for text in texts), texts
        client.execute_interactive("(call cbrt (double 8.0))", output_hook=keep, timeout=TIMEOUT)
        assert "2.0 : double" in texts, texts
        reply = client.execute_interactive('(load-library "libquasi-none.so")', output_hook=keep, timeout=TIMEOUT)
        assert reply["content"]["ename"] == "error[ffi]"
