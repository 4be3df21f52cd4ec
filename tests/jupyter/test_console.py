"""jupyter console, the terminal client, driven in a pseudo-terminal."""

import os
import sys

import pexpect

from conftest import KERNEL_NAME

TIMEOUT = 30


def spawn_console():
    console = os.path.join(os.path.dirname(sys.executable), "jupyter-console")
    # --simple-prompt: plain `In [n]:` prompts that pexpect can wait for.
    child = pexpect.spawn(console, ["--kernel", KERNEL_NAME, "--simple-prompt"], encoding="utf-8", timeout=TIMEOUT, dimensions=(40, 200))
    child.expect(r"Quasi .*:help")  # the kernel's banner
    child.expect_exact("In [1]: ")
    return child


def test_a_cell_in_jupyter_console():
    child = spawn_console()
    try:
        child.sendline("(define ((sq int) (x int)) (ret (mul x x)))")
        child.expect_exact("sq : (int) -> int")
        child.expect_exact("In [2]: ")
        child.sendline("(call sq 7)")
        child.expect_exact("Out[2]: 49 : int")
        child.expect_exact("In [3]: ")
        child.sendline("(add 1 2.5)")
        child.expect_exact("error[type]")
        child.expect_exact("In [4]: ")
        # `:quit` answers with an ask_exit payload: the console leaves and shuts the kernel down.
        child.sendline(":quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, child.before
