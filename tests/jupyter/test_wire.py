"""The kernel's process and wire behaviour, with kernels of their own: signatures, parent
death, shutdown and restart."""

import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
import zmq
from jupyter_client import BlockingKernelClient, KernelManager
from jupyter_client.connect import write_connection_file
from jupyter_client.session import Session

from conftest import KERNEL_NAME, kernel_argv, process_gone

TIMEOUT = 15


def wait_until(condition, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.fixture
def kernel(tmp_path):
    """A running kernel (its stderr in `manager.log_path`) and a ready client."""
    manager = KernelManager(kernel_name=KERNEL_NAME)
    manager.log_path = tmp_path / "kernel.log"
    # Open for the whole test: a restart launches the kernel again with the same arguments.
    with open(manager.log_path, "wb") as log:
        manager.start_kernel(stderr=log)
        client = manager.client()
        client.start_channels()
        client.wait_for_ready(timeout=TIMEOUT)
        yield manager, client
        client.stop_channels()
        if manager.is_alive():
            manager.shutdown_kernel(now=True)


def raw_socket(context, manager, kind, port_name):
    socket = context.socket(kind)
    socket.linger = 0
    info = manager.get_connection_info()
    socket.connect(f"tcp://{info['ip']}:{info[port_name]}")
    return socket


def test_bad_signatures_are_dropped(kernel):
    manager, _ = kernel
    context = zmq.Context()
    shell = raw_socket(context, manager, zmq.DEALER, "shell_port")
    iopub = raw_socket(context, manager, zmq.SUB, "iopub_port")
    iopub.setsockopt(zmq.SUBSCRIBE, b"")
    time.sleep(0.3)  # the subscription reaches the kernel's PUB socket

    forger = Session(key=b"not-the-key")
    forged = forger.send(shell, "execute_request", {"code": "(add 1 1)", "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
    # An unsigned message is as bad as a forged one.
    unsigned = Session(key=b"")
    unsigned.send(shell, "kernel_info_request", {})

    assert shell.poll(1500) == 0, "the kernel answered a message with a bad signature"
    while iopub.poll(100):
        parts = iopub.recv_multipart()
        assert forged["header"]["msg_id"].encode() not in b"".join(parts), "the kernel published for a forged message"

    # The same socket with the right key is answered: only the signature was wrong.
    genuine = Session(key=manager.session.key)
    request = genuine.send(shell, "kernel_info_request", {})
    assert shell.poll(TIMEOUT * 1000), "no reply to a correctly signed message"
    _, reply = genuine.feed_identities(shell.recv_multipart())
    reply = genuine.deserialize(reply)
    assert reply["parent_header"]["msg_id"] == request["header"]["msg_id"]

    manager.shutdown_kernel(now=True)
    log = manager.log_path.read_text()
    assert log.count("bad signature") >= 2, log
    context.destroy()


def test_a_replayed_request_is_not_run_again(kernel):
    """A captured, validly signed execute_request sent again is dropped (jupyter_client's
    Session keeps a history of signatures for this); a new request is still answered."""
    manager, client = kernel
    context = zmq.Context()
    shell = raw_socket(context, manager, zmq.DEALER, "shell_port")
    session = Session(key=manager.session.key)

    def execute(code):
        return session.msg("execute_request", {"code": code, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})

    def reply_to(message):
        assert shell.poll(TIMEOUT * 1000), "no reply to a correctly signed message"
        _, parts = session.feed_identities(shell.recv_multipart())
        reply = session.deserialize(parts)
        assert reply["parent_header"]["msg_id"] == message["header"]["msg_id"]
        return reply

    define = execute("(declare counter int)")
    step = execute("(set counter (add counter 1))")
    for message in (define, step):
        frames = session.serialize(message)
        shell.send_multipart(frames)
        assert reply_to(message)["content"]["status"] == "ok"
    # The same frames again, signature and all: never run a second time.
    shell.send_multipart(frames)
    assert shell.poll(1500) == 0, "the kernel answered a replayed message"
    # The counter was stepped once.
    results = []
    client.execute_interactive("counter", timeout=TIMEOUT, output_hook=results.append)
    shown = [message["content"]["data"]["text/plain"] for message in results if message["msg_type"] == "execute_result"]
    assert shown == ["1 : int"], results
    manager.shutdown_kernel(now=True)
    log = manager.log_path.read_text()
    assert "replay" in log, log
    context.destroy()


def test_shutdown_request_ends_the_process(kernel):
    manager, client = kernel
    process = manager.provisioner.process
    msg_id = client.shutdown()
    reply = client.get_control_msg(timeout=TIMEOUT) if hasattr(client, "get_control_msg") else client.control_channel.get_msg(timeout=TIMEOUT)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["content"] == {"restart": False, "status": "ok"}
    assert process.wait(timeout=5) == 0


def test_restart_gives_a_fresh_session_quickly(kernel):
    manager, client = kernel
    client.execute_interactive("(define ((gone int)) (ret 1))", timeout=TIMEOUT)
    started = time.monotonic()
    manager.restart_kernel()
    # The kernel exits on the restart's shutdown_request instead of waiting to be killed.
    assert time.monotonic() - started < 4
    client.wait_for_ready(timeout=TIMEOUT)
    reply = client.execute_interactive("(call gone)", timeout=TIMEOUT)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "error[unknown-name]"


def start_orphanable_kernel(tmp_path, parent_code):
    """Starts a kernel from a throwaway Python parent; returns (parent, kernel pid, client)."""
    connection_file = str(tmp_path / "kernel.json")
    write_connection_file(connection_file, ip="127.0.0.1", key=b"a-key")
    argv = [part.replace("{connection_file}", connection_file) for part in kernel_argv()]
    parent = subprocess.Popen([sys.executable, "-c", parent_code, repr(argv)], stdout=subprocess.PIPE, text=True)
    kernel_pid = int(parent.stdout.readline())
    client = BlockingKernelClient(connection_file=connection_file)
    client.load_connection_file()
    client.start_channels()
    client.wait_for_ready(timeout=TIMEOUT)
    return parent, kernel_pid, client


def test_kernel_exits_when_its_parent_dies(tmp_path):
    parent_code = """
import ast, os, subprocess, sys, time
env = dict(os.environ, JPY_PARENT_PID=str(os.getpid()))
kernel = subprocess.Popen(ast.literal_eval(sys.argv[1]), env=env)
print(kernel.pid, flush=True)
time.sleep(600)
"""
    parent, kernel_pid, client = start_orphanable_kernel(tmp_path, parent_code)
    client.stop_channels()
    parent.kill()
    parent.wait()
    assert wait_until(lambda: process_gone(kernel_pid), 10), "the kernel outlived its parent"


def test_kernel_exits_when_a_named_non_parent_dies(tmp_path):
    # JPY_PARENT_PID may name a process that is not the direct parent (a launcher in between).
    watched = subprocess.Popen(["sleep", "600"])
    parent_code = f"""
import ast, os, subprocess, sys, time
env = dict(os.environ, JPY_PARENT_PID="{watched.pid}")
kernel = subprocess.Popen(ast.literal_eval(sys.argv[1]), env=env)
print(kernel.pid, flush=True)
kernel.wait()
"""
    parent, kernel_pid, client = start_orphanable_kernel(tmp_path, parent_code)
    client.stop_channels()
    assert not process_gone(kernel_pid)
    watched.kill()
    watched.wait()
    assert parent.wait(timeout=10) == 0
    assert process_gone(kernel_pid)


def test_sigint_does_not_end_the_session(kernel):
    manager, client = kernel
    client.execute_interactive("(define ((stays int)) (ret 3))", timeout=TIMEOUT)
    manager.provisioner.process.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert manager.is_alive()
    outputs = []
    client.execute_interactive("(call stays)", timeout=TIMEOUT, output_hook=outputs.append)
    assert [m["content"]["data"]["text/plain"] for m in outputs if m["msg_type"] == "execute_result"] == ["3 : int"]


def test_a_cell_that_is_not_utf8_fails_and_the_next_cells_run(kernel):
    """A correctly signed execute_request whose content has bytes that are not UTF-8 is answered
    with an error naming the byte (it used to be dropped, leaving the client waiting); the cell
    does not run, and the next cells do."""
    manager, client = kernel
    context = zmq.Context()
    shell = raw_socket(context, manager, zmq.DEALER, "shell_port")
    header = json.dumps({"msg_id": str(uuid.uuid4()), "username": "test", "session": str(uuid.uuid4()),
                         "date": "2026-01-01T00:00:00Z", "msg_type": "execute_request", "version": "5.3"}).encode()
    content = (b'{"code": "(add 1 \xff)", "silent": false, "store_history": true, "user_expressions": {},'
               b' "allow_stdin": false, "stop_on_error": true}')
    frames = [header, b"{}", b"{}", content]
    signature = hmac.new(manager.session.key, digestmod=hashlib.sha256)
    for frame in frames:
        signature.update(frame)
    shell.send_multipart([b"<IDS|MSG>", signature.hexdigest().encode()] + frames)
    assert shell.poll(TIMEOUT * 1000), "no reply to a request that is not UTF-8"
    reply = json.loads(shell.recv_multipart()[-1])
    assert reply["status"] == "error", reply
    assert reply["ename"] == "error[syntax]", reply
    assert "byte 0xff at byte 17 of the request's content is not UTF-8" in reply["evalue"], reply
    context.destroy()
    after = client.execute_interactive("(add 2 3)", timeout=TIMEOUT)
    assert after["content"]["status"] == "ok"
