"""Shared helpers for the Jupyter tests of quasi-kernel (run by scripts/test.sh)."""

import json
import os
import pathlib
import subprocess

import pytest
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

KERNEL_NAME = "quasi"
ROOT = pathlib.Path(__file__).resolve().parents[2]


def kernel_argv():
    """The kernelspec's command line, with {connection_file} left in."""
    spec = KernelSpecManager().get_kernel_spec(KERNEL_NAME)
    return spec.argv


def process_gone(pid):
    """True once a process has exited (a zombie counts as exited)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    state = stat[stat.rindex(")") + 2 :].split()[0]
    return state in ("Z", "X")


@pytest.fixture(scope="session", autouse=True)
def kernelspec_installed():
    try:
        KernelSpecManager().get_kernel_spec(KERNEL_NAME)
    except NoSuchKernel:
        pytest.exit("no `quasi` kernelspec: run `quasi-kernel install --sys-prefix` in this environment", returncode=2)
