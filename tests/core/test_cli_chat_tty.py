#!/usr/bin/env python3
"""servelab-cli chat at a terminal: GNU readline's line editing and history (issue 35).

The CLI runs on a pseudo-terminal (stdin and stderr; stdout a pipe unless said otherwise) on the
built-in model, greedy, a few tokens per answer. Keys are typed as a person would, each after the
prompt shows; no assertion depends on how long anything takes (the waits only stop a hang).

  editing   "ay hellx", Backspace, "o", Ctrl-A, "S", Ctrl-E, Enter: the model's turn is "Say hello"
            and its answer is the one the same line through a pipe gets; Up, Enter sends it again;
            Ctrl-D ends the chat with exit 0; the history file holds the line; stdout no escapes.
  history   a second run with the same $XDG_STATE_HOME: Up, Enter sends the first run's line.
  unkept    $XDG_STATE_HOME a file: one warning line, and the chat (/system, /reset, a turn) goes on;
            stdout on the terminal too, with NO_COLOR set: no colour codes.

Standard library only. Run: python3 tests/core/test_cli_chat_tty.py --cli build/release/app/servelab-cli
  --model .venv/share/servelab/models/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import argparse
import json
import os
import pty
import select
import subprocess
import sys
import tempfile
import time
import unittest

CLI = None
MODEL = None
WAIT_S = 300  # only stops a hang: a model load and a few tokens on a busy 2-core machine
ARGS = ["chat", "--max-new-tokens", "4"]

UP, CTRL_A, CTRL_D, CTRL_E, BACKSPACE = b"\x1b[A", b"\x01", b"\x04", b"\x05", b"\x7f"


class Terminal:
    """servelab-cli chat with stdin and stderr (and stdout, when asked) on a pseudo-terminal."""

    def __init__(self, args, env, stdout_on_terminal=False):
        self.master, slave = pty.openpty()
        self.seen = b""  # everything the terminal showed
        self.mark = 0  # where in seen the last prompt ended
        self.proc = subprocess.Popen(
            [CLI] + args, stdin=slave, stderr=slave,
            stdout=slave if stdout_on_terminal else subprocess.PIPE, env=env, close_fds=True)
        os.close(slave)

    def _read(self, timeout):
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.master, 4096)
        except OSError:  # EIO: the program has ended and the terminal is closed
            return None
        if not data:
            return None
        self.seen += data
        return True

    def wait_for_prompt(self):
        """Waits for the next prompt: "> " after a line ended (the banner's, or the Enter typed
        last), so that readline's redrawing of the line being edited is not taken for one."""
        deadline = time.monotonic() + WAIT_S
        while True:
            newline = self.seen.find(b"\n", self.mark)
            if newline >= 0 and self.seen.find(b"> ", newline) >= 0:
                self.mark = len(self.seen)
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"no prompt on the terminal; it showed {self.seen!r}")
            if self._read(1.0) is None:
                raise AssertionError(f"the chat ended before its prompt; the terminal showed {self.seen!r}")

    def type(self, keys):
        os.write(self.master, keys)

    def finish(self):
        """Waits for the exit; returns (exit status, stdout bytes or None)."""
        out, _ = self.proc.communicate(timeout=WAIT_S)
        while self._read(0.1):
            pass
        os.close(self.master)
        return self.proc.returncode, out


def env_with(state_home, **extra):
    # INPUTRC: readline's default keys (emacs), whatever the machine's inputrc binds.
    env = dict(os.environ, XDG_STATE_HOME=state_home, TERM="xterm", INPUTRC=os.devnull)
    env.pop("NO_COLOR", None)
    env.update(extra)
    return env


def messages(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class ChatAtATerminal(unittest.TestCase):
    def setUp(self):
        if not os.path.isfile(MODEL):
            self.skipTest("the built-in model is not installed here (scripts/bootstrap installs it)")
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.state = os.path.join(self.dir, "state")

    def tearDown(self):
        self.tmp.cleanup()

    def piped_answer(self, line):
        saved = os.path.join(self.dir, "piped.json")
        p = subprocess.run([CLI] + ARGS + ["--save", saved], input=(line + "\n").encode(),
                           capture_output=True, timeout=WAIT_S, env=env_with(self.state))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn(b"\x1b", p.stderr + p.stdout)  # no readline, no prompt from a pipe
        return messages(saved)[1]["content"]

    def test_editing_history_and_end_of_input(self):
        expected = self.piped_answer("Say hello")
        self.assertFalse(os.path.exists(self.state), "a piped chat keeps no history")
        saved = os.path.join(self.dir, "tty.json")
        t = Terminal(ARGS + ["--save", saved], env_with(self.state))
        t.wait_for_prompt()
        t.type(b"ay hellx" + BACKSPACE + b"o" + CTRL_A + b"S" + CTRL_E + b"\r")
        t.wait_for_prompt()
        t.type(UP + b"\r")  # the line again, from the session's history
        t.wait_for_prompt()
        t.type(CTRL_D)
        code, out = t.finish()
        self.assertEqual(code, 0, t.seen)
        m = messages(saved)
        self.assertEqual([x["role"] for x in m], ["user", "assistant", "user", "assistant"], m)
        self.assertEqual(m[0]["content"], "Say hello")
        self.assertEqual(m[1]["content"], expected)  # greedy: the same answer as from the pipe
        self.assertEqual(m[2]["content"], "Say hello")
        self.assertIn(expected.encode(), out)
        self.assertNotIn(b"\x1b", out)  # stdout is a pipe: no colour, and readline writes to stderr
        with open(os.path.join(self.state, "servelab", "chat_history"), encoding="utf-8") as f:
            self.assertEqual(f.read().splitlines(), ["Say hello"])

        # A second run: the first run's line is one Up away.
        again = os.path.join(self.dir, "again.json")
        t = Terminal(ARGS + ["--save", again], env_with(self.state))
        t.wait_for_prompt()
        t.type(UP + b"\r")
        t.wait_for_prompt()
        t.type(CTRL_D)
        code, _ = t.finish()
        self.assertEqual(code, 0, t.seen)
        self.assertEqual(messages(again)[0]["content"], "Say hello")

    def test_history_that_cannot_be_kept_is_a_warning(self):
        not_a_folder = os.path.join(self.dir, "state-file")
        open(not_a_folder, "w").close()
        saved = os.path.join(self.dir, "unkept.json")
        t = Terminal(ARGS + ["--save", saved], env_with(not_a_folder, NO_COLOR="1"), stdout_on_terminal=True)
        t.wait_for_prompt()
        t.type(b"/system Be brief.\r")
        t.wait_for_prompt()
        t.type(b"Hi\r")
        t.wait_for_prompt()
        t.type(b"/reset\r")
        t.wait_for_prompt()
        t.type(b"/exit\r")
        code, _ = t.finish()
        self.assertEqual(code, 0, t.seen)
        warnings = [line for line in t.seen.splitlines() if b"warning" in line]
        self.assertEqual(len(warnings), 1, t.seen)
        self.assertIn(b"the chat history is not kept in " + not_a_folder.encode(), warnings[0])
        self.assertIn(b"(system prompt set)", t.seen)
        self.assertIn(b"starts over", t.seen)
        self.assertNotIn(b"\x1b[36m", t.seen)  # NO_COLOR: the answer is not coloured
        self.assertNotIn(b"\x1b[0m", t.seen)
        self.assertEqual(messages(saved), [{"role": "system", "content": "Be brief."}])


def main():
    global CLI, MODEL
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", required=True)
    parser.add_argument("--model", required=True, help="the built-in model's file (skipped when absent)")
    args, rest = parser.parse_known_args()
    CLI, MODEL = os.path.abspath(args.cli), args.model
    unittest.main(argv=[sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
