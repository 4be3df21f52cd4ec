"""Protocol conformance: jupyter_kernel_test's suite for Quasi, plus the cases it has no
hooks for (busy/idle around kernel_info, silent cells, aborting queued cells, interrupts)."""

import time
from queue import Empty

import jupyter_kernel_test
from jupyter_kernel_test.msgspec_v5 import validate_message

TIMEOUT = 15

PRINTF = "(define ((printf int) (fmt (ptr int8)) ...))"
DPRINTF = "(define ((dprintf int) (fd int) (fmt (ptr int8)) ...))"
SQUARE = "(define ((sq int) (x int)) (ret (mul x x)))"


class QuasiKernelTests(jupyter_kernel_test.KernelTests):
    kernel_name = "quasi"
    language_name = "c-lisp"
    file_extension = ".cl"

    code_hello_world = PRINTF + '\n(call printf "hello, world\\n")'
    code_stderr = DPRINTF + '\n(call dprintf 2 "to stderr\\n")'
    code_generate_error = "(add 1 2.5)"

    completion_samples = [
        {"text": "(fad", "matches": ["fadd"]},
        {"text": "(ptr", "matches": ["ptr", "ptr-to", "ptradd", "ptrtoint"]},
        {"text": ":de", "matches": [":defs"]},
    ]
    complete_code_samples = ["(add 1 2)", SQUARE, ":defs", "", "; a comment"]
    incomplete_code_samples = ["(define ((sq int) (x int))", '(call printf "open', "(add 1\n  (mul 2"]
    invalid_code_samples = [")", "(add 1 2))"]

    code_execute_result = [
        {"code": "(add 40 2)", "result": "42 : int"},
        {"code": "(mul 6 7)", "result": "42 : int"},
        {"code": "(fadd 1.5 2.25)", "result": "3.75 : float"},
        {"code": "(sub 50 8)", "mime": "text/html"},
    ]
    code_history_pattern = "(mul 6*"
    supported_history_operations = ("tail", "range", "search")

    code_display_data = [
        {"code": SQUARE, "mime": "text/plain"},
        {"code": SQUARE, "mime": "text/html"},
        # A warning: the function can end without (ret …).
        {"code": "(define ((noret int)) (declare y int))", "mime": "text/html"},
    ]

    code_inspect_sample = "sq"

    # -- helpers ------------------------------------------------------------------------------

    def iopub_for(self, msg_id, timeout=TIMEOUT):
        """The iopub messages of one request, up to and including its idle status."""
        messages = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = self.kc.get_iopub_msg(timeout=timeout)
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            validate_message(message, message["msg_type"], msg_id)
            messages.append(message)
            if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                return messages
        raise AssertionError(f"no idle status for {msg_id}")

    def shell_reply(self, msg_id):
        while True:
            reply = self.kc.get_shell_msg(timeout=TIMEOUT)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply

    def run_cell(self, code, **options):
        msg_id = self.kc.execute(code, **options)
        reply = self.shell_reply(msg_id)
        return reply, self.iopub_for(msg_id)

    # -- jupyter_kernel_test cases that need a definition first ---------------------------------

    def test_inspect(self):
        self.flush_channels()
        self.run_cell(SQUARE)
        super().test_inspect()
        msg_id = self.kc.inspect("(call sq 3)", cursor_pos=len("(call sq"))
        reply = self.shell_reply(msg_id)
        self.assertEqual(reply["content"]["data"]["text/plain"], "sq : (int) -> int")

    # -- Quasi's own -----------------------------------------------------------------------------

    def test_busy_idle_around_kernel_info(self):
        self.flush_channels()
        msg_id = self.kc.kernel_info()
        self.shell_reply(msg_id)
        states = [m["content"]["execution_state"] for m in self.iopub_for(msg_id) if m["msg_type"] == "status"]
        self.assertEqual(states, ["busy", "idle"])

    def test_kernel_info_language(self):
        self.flush_channels()
        reply = self.shell_reply(self.kc.kernel_info())
        info = reply["content"]["language_info"]
        self.assertEqual(reply["content"]["protocol_version"], "5.3")
        self.assertEqual(info["mimetype"], "text/x-c-lisp")
        self.assertEqual(info["codemirror_mode"], "c-lisp")
        self.assertIn(info["pygments_lexer"], ("scheme", "commonlisp"))

    def test_silent_cell_publishes_nothing_and_keeps_the_count(self):
        self.flush_channels()
        before, _ = self.run_cell("(add 1 1)")
        reply, messages = self.run_cell(PRINTF + '\n(call printf "quiet\\n")', silent=True)
        self.assertEqual(reply["content"]["status"], "ok")
        self.assertEqual([m["msg_type"] for m in messages], ["status", "status"])
        self.assertEqual(reply["content"]["execution_count"], before["content"]["execution_count"])

    def test_store_history_false_keeps_the_count(self):
        self.flush_channels()
        first, _ = self.run_cell("(add 1 1)")
        unstored, _ = self.run_cell("(add 2 2)", store_history=False)
        second, _ = self.run_cell("(add 3 3)")
        count = first["content"]["execution_count"]
        self.assertEqual(unstored["content"]["execution_count"], count)
        self.assertEqual(second["content"]["execution_count"], count + 1)

    def test_queued_cells_are_aborted_after_an_error(self):
        self.flush_channels()
        failing = self.kc.execute("(add 1 2.5)")
        queued = [self.kc.execute("(add 1 1)"), self.kc.execute("(add 2 2)")]
        self.assertEqual(self.shell_reply(failing)["content"]["status"], "error")
        for msg_id in queued:
            self.assertEqual(self.shell_reply(msg_id)["content"]["status"], "aborted")
        # Aborting ends with the queue: the next cell runs.
        reply, _ = self.run_cell("(add 3 3)")
        self.assertEqual(reply["content"]["status"], "ok")

    def test_stop_on_error_false_runs_queued_cells(self):
        self.flush_channels()
        failing = self.kc.execute("(add 1 2.5)", stop_on_error=False)
        queued = self.kc.execute("(add 1 1)")
        self.assertEqual(self.shell_reply(failing)["content"]["status"], "error")
        self.assertEqual(self.shell_reply(queued)["content"]["status"], "ok")

    def test_error_traceback_is_the_rendered_diagnostic(self):
        self.flush_channels()
        reply, messages = self.run_cell("(add 1 2.5)")
        self.assertEqual(reply["content"]["ename"], "error[type]")
        self.assertIn("must have one integer type", reply["content"]["evalue"])
        (error,) = [m for m in messages if m["msg_type"] == "error"]
        traceback = "\n".join(error["content"]["traceback"])
        self.assertIn("(add 1 2.5)", traceback)
        self.assertIn("^^^", traceback)

    def test_runtime_fault_keeps_the_session(self):
        self.flush_channels()
        self.run_cell("(define ((keep int)) (ret 7))")
        reply, _ = self.run_cell("(div 1 0)")
        self.assertEqual(reply["content"]["ename"], "error[runtime-fault]")
        _, messages = self.run_cell("(call keep)")
        results = [m["content"]["data"]["text/plain"] for m in messages if m["msg_type"] == "execute_result"]
        self.assertEqual(results, ["7 : int"])

    def test_redefinition_reaches_existing_callers(self):
        self.flush_channels()
        self.run_cell("(define ((scale int) (x int)) (ret (mul x 2)))")
        self.run_cell("(define ((twice int) (x int)) (ret (call scale x)))")
        _, messages = self.run_cell("(define ((scale int) (x int)) (ret (mul x 10)))\n(call twice 4)")
        shown = [m["content"]["data"]["text/plain"] for m in messages if m["msg_type"] in ("display_data", "execute_result")]
        self.assertEqual(shown, ["scale : (int) -> int  (redefined)", "40 : int"])

    def test_a_pasted_transcript_runs_cell_by_cell(self):
        self.flush_channels()
        # The outputs pasted are stale: what is shown comes from running the cells.
        pasted = "> " + SQUARE + "\nsq : (int) -> float\n> (call sq 8)\n49 : int\n> (call nope 1)\n> (call sq 2)\n4 : int\n"
        reply, messages = self.run_cell(pasted)
        shown = [m["content"]["data"]["text/plain"] for m in messages if m["msg_type"] in ("display_data", "execute_result")]
        # Up to the failing cell; the cell after it does not run.
        self.assertEqual(shown, ["sq : (int) -> int", "64 : int"])
        self.assertEqual(reply["content"]["status"], "error")
        self.assertIn("no function named `nope`", reply["content"]["evalue"])

    def test_html_is_escaped(self):
        self.flush_channels()
        _, messages = self.run_cell('(define ((lt<gt int)) (ret 1))')
        (display,) = [m for m in messages if m["msg_type"] == "display_data"]
        self.assertIn("lt&lt;gt", display["content"]["data"]["text/html"])
        self.assertNotIn("lt<gt", display["content"]["data"]["text/html"])

    def test_completion_cursor_counts_code_points(self):
        self.flush_channels()
        code = '(call printf "é") (fad'
        reply = self.shell_reply(self.kc.complete(code))
        self.assertEqual(reply["content"]["matches"], ["fadd"])
        self.assertEqual(reply["content"]["cursor_start"], len(code) - len("fad"))
        self.assertEqual(reply["content"]["cursor_end"], len(code))

    def test_completion_of_call_operands_and_header_names(self):
        self.flush_channels()
        self.run_cell(SQUARE)
        self.run_cell("(define-global (sq-total int))")
        reply = self.shell_reply(self.kc.complete("(add (call sq"))
        self.assertEqual(reply["content"]["matches"], ["sq"])
        code = '(include "stdi'
        reply = self.shell_reply(self.kc.complete(code))
        self.assertIn("stdio.h", reply["content"]["matches"])
        self.assertEqual(reply["content"]["cursor_start"], len('(include "'))
        types = {item["text"]: item["type"] for item in reply["content"]["metadata"]["_jupyter_types_experimental"]}
        self.assertEqual(types["stdio.h"], "path")

    def test_inspect_a_builtin_shows_its_reference_row(self):
        # Shift-Tab on a form, an opcode or a command answers from docs/language.md's tables
        # (lang/src/reference.rs) and the command table, as `:help` does.
        self.flush_channels()
        cases = [
            ("(ptradd p 1)", len("(ptr"), "(ptradd p i)    (§3.5 Expressions)\n  operands → result: (ptr T …) I → p's type\n  C: p + i\n"),
            ("(fadd x y)", len("(fadd"), "(fadd a b) (fsub …) (fmul …) (fdiv …)    (§3.5 Expressions)\n"),
            ("(launch k (grid 1) (block 32))", len("(lau"), "(launch K (grid X [Y [Z]]) (block X [Y [Z]]) ARG…)    (§7.3 Host side)\n"),
            ("(bench (call f))", len("(bench"), "(bench EXPR [(time S)] [(iters N)] [(warmup N)] [(bytes E)] [(flops E)])    (§8 "),
            (":ptx vadd", len(":pt"), ":ptx [NAME]  PTX of a kernel"),
        ]
        for code, cursor, expected in cases:
            reply = self.shell_reply(self.kc.inspect(code, cursor_pos=cursor))
            validate_message(reply, "inspect_reply")
            self.assertTrue(reply["content"]["found"], code)
            self.assertTrue(reply["content"]["data"]["text/plain"].startswith(expected), (code, reply["content"]["data"]))

    def test_a_long_autotune_updates_a_progress_display_in_place(self):
        # Six variants of 0.2 s each: past the half second, the cell shows a progress display
        # (display_data with a display id, marked "quasi": {"progress": true}) and updates it in
        # place (update_display_data, the same id) up to its last line; the table follows.
        self.flush_channels()
        self.run_cell('(rhai "fn gen_id(k) { quote(\\"(define ((id int) (n int)) (ret (add n ,k)))\\", #{ k: k }) }")')
        reply, messages = self.run_cell("(autotune id (gen gen_id k) (params (k 0 1 2 3 4 5)) (run (call id 1)) (check 0) (fresh))")
        self.assertEqual(reply["content"]["status"], "ok")
        shown = [m for m in messages if m["msg_type"] in ("display_data", "update_display_data", "execute_result")]
        first = shown[0]
        self.assertEqual(first["msg_type"], "display_data")
        display_id = first["content"]["transient"]["display_id"]
        self.assertTrue(display_id.startswith("quasi-progress-"))
        self.assertEqual(first["content"]["metadata"], {"quasi": {"progress": True}})
        self.assertRegex(first["content"]["data"]["text/plain"], r"^autotune id: [1-6] of 6 variants, ")
        updates = [m for m in shown if m["msg_type"] == "update_display_data"]
        self.assertTrue(updates, shown)
        for update in updates:
            self.assertEqual(update["content"]["transient"]["display_id"], display_id)
        self.assertRegex(updates[-1]["content"]["data"]["text/plain"], r"^autotune id: 6 of 6 variants in \d+\.\d s$")
        # The table comes after the progress display, not inside it.
        table = [m for m in shown if "autotune id: 6 variants" in m["content"]["data"].get("text/plain", "")]
        self.assertTrue(table and shown.index(table[0]) > shown.index(updates[-1]), shown)

    def test_inspect_unknown_name(self):
        self.flush_channels()
        reply = self.shell_reply(self.kc.inspect("no-such-name"))
        validate_message(reply, "inspect_reply")
        self.assertFalse(reply["content"]["found"])

    def test_is_complete_indents_two_spaces_per_open_list(self):
        self.flush_channels()
        reply = self.shell_reply(self.kc.is_complete("(define ((sq int) (x int))\n  (ret"))
        self.assertEqual(reply["content"], {"status": "incomplete", "indent": "    "})

    def test_comm_info_is_empty(self):
        self.flush_channels()
        reply = self.shell_reply(self.kc.comm_info())
        validate_message(reply, "comm_info_reply")
        self.assertEqual(reply["content"]["comms"], {})

    def test_interrupt_keeps_the_kernel(self):
        self.flush_channels()
        self.run_cell("(define ((kept int)) (ret 5))")
        request = self.kc.session.msg("interrupt_request", {})
        self.kc.control_channel.send(request)
        reply = self.kc.control_channel.get_msg(timeout=TIMEOUT)
        validate_message(reply, "interrupt_reply", request["header"]["msg_id"])
        self.assertEqual(reply["content"]["status"], "ok")
        _, messages = self.run_cell("(call kept)")
        results = [m["content"]["data"]["text/plain"] for m in messages if m["msg_type"] == "execute_result"]
        self.assertEqual(results, ["5 : int"])

    def test_interrupt_stops_staging(self):
        self.flush_channels()
        self.run_cell(":limits operations 100000000000")
        self.run_cell('(rhai "fn spin() { loop { } }")')
        try:
            self.interrupt_running(",(spin)")
        finally:
            self.run_cell(":limits operations 10000000")
        self.assertEqual(self.results_of("(add 2 3)"), ["5 : int"])

    def interrupt_running(self, code):
        """Runs `code`, interrupts it half a second later; returns the interrupted execute_reply."""
        msg_id = self.kc.execute(code)
        time.sleep(0.5)
        request = self.kc.session.msg("interrupt_request", {})
        self.kc.control_channel.send(request)
        control_reply = self.kc.control_channel.get_msg(timeout=TIMEOUT)
        validate_message(control_reply, "interrupt_reply", request["header"]["msg_id"])
        reply = self.kc.get_shell_msg(timeout=TIMEOUT)
        self.assertEqual(reply["parent_header"]["msg_id"], msg_id)
        self.assertEqual(reply["content"]["status"], "error")
        self.assertEqual(reply["content"]["ename"], "error[interrupted]")
        return reply

    def results_of(self, code):
        _, messages = self.run_cell(code)
        return [m["content"]["data"]["text/plain"] for m in messages if m["msg_type"] == "execute_result"]

    def test_interrupt_stops_a_compiled_loop_and_keeps_definitions(self):
        self.flush_channels()
        # Pinned: the loop's stores to `spins` are checked below, and optimised code (opt 3, as
        # tiered compilation would promote `spin` to) may keep `spins` in a register until the
        # loop ends, which it never does (docs/language.md §4).
        self.run_cell(":opt 1")
        self.run_cell("(define-global (spins int64))")
        self.run_cell("(define ((spin void)) (while #t (set spins (add spins (int64 1)))))")
        reply = self.interrupt_running("(call spin)")
        self.assertIn("interrupted in function `spin`", reply["content"]["evalue"])
        self.assertEqual(self.results_of("(gt spins (int64 0))"), ["#t : bool"])
        self.run_cell(":opt tiered")

    def test_exit_in_user_code_keeps_the_kernel(self):
        self.flush_channels()
        self.run_cell("(define ((exit void) (status int)))")
        reply, _ = self.run_cell("(call exit 3)")
        self.assertEqual(reply["content"]["status"], "error")
        self.assertIn("the program called exit(3)", reply["content"]["evalue"])
        self.assertEqual(self.results_of("(add 2 3)"), ["5 : int"])

    def test_tables_and_listings_are_rich(self):
        self.flush_channels()
        self.run_cell("(define ((sq int) (x int)) (ret (mul x x)))")
        _, messages = self.run_cell(":time last")
        (timing,) = [m["content"]["data"] for m in messages if m["msg_type"] == "display_data"]
        self.assertIn("<table", timing["text/html"])
        self.assertIn("phase", timing["text/plain"])
        _, messages = self.run_cell("(bench (call sq 3) (iters 20))")
        (bench,) = [m["content"]["data"] for m in messages if m["msg_type"] == "display_data"]
        self.assertIn("<table", bench["text/html"])
        self.assertTrue(bench["text/plain"].startswith("bench: 20 runs"))
        # The chart: as an image, and inside the HTML (which front ends prefer to show).
        self.assertTrue(bench["image/svg+xml"].lstrip().startswith("<svg"))
        self.assertIn("<svg", bench["text/html"])
        _, messages = self.run_cell(":ir sq")
        (listing,) = [m["content"]["data"] for m in messages if m["msg_type"] == "display_data"]
        self.assertIn("```llvm", listing["text/markdown"])
        self.assertIn("define i32 @", listing["text/plain"])
        self.assertIn("mul i32", listing["text/plain"])

    def test_kernel_info_on_control_while_a_cell_runs(self):
        self.flush_channels()
        # A cell that computes for a while (about a second at -O1): control still answers.
        slow = "(define ((spin int) (n int)) (declare i int) (declare s int) (for ((set i 0) (lt i n) (set i (add i 1))) (set s (add s (rem i 7)))) (ret s))"
        self.run_cell(slow)
        running = self.kc.execute("(call spin 400000000)")
        time.sleep(0.2)
        request = self.kc.session.msg("kernel_info_request", {})
        started = time.monotonic()
        self.kc.control_channel.send(request)
        reply = self.kc.control_channel.get_msg(timeout=TIMEOUT)
        answered = time.monotonic() - started
        validate_message(reply, "kernel_info_reply", request["header"]["msg_id"])
        self.assertEqual(self.shell_reply(running)["content"]["status"], "ok")
        self.assertLess(answered, 0.5)

    def test_quit_asks_the_front_end_to_exit(self):
        self.flush_channels()
        reply, _ = self.run_cell(":quit")
        self.assertEqual(reply["content"]["payload"], [{"source": "ask_exit", "keepkernel": False}])

    def test_program_output_streams_while_the_cell_runs(self):
        self.flush_channels()
        self.run_cell("(define ((usleep int) (us int)))")
        self.run_cell(PRINTF)
        code = '(declare k int)\n(for ((set k 1) (le k 3) (set k (add k 1))) (call printf "tick %d\\n" k) (call usleep 700000))'
        msg_id = self.kc.execute(code)
        started = time.monotonic()
        arrived = {}
        while True:
            message = self.kc.get_iopub_msg(timeout=TIMEOUT)
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            if message["msg_type"] == "stream":
                for line in message["content"]["text"].splitlines():
                    arrived[line] = time.monotonic() - started
            if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                break
        self.assertEqual(self.shell_reply(msg_id)["content"]["status"], "ok")
        # 700 ms apart as printed; had output waited for the end of the cell, all three would
        # arrive in one message after the last sleep.
        self.assertGreaterEqual(arrived["tick 2"] - arrived["tick 1"], 0.4, arrived)
        self.assertGreaterEqual(arrived["tick 3"] - arrived["tick 2"], 0.4, arrived)

