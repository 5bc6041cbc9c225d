"""The shell completions (completions/): the bash script completes the
commands, a command's options and the values some take, and both scripts
know every long option each command's --help lists (so they cannot drift
from the commands).

Env: GRADTRACE, GT_SOURCE_DIR (set by ctest).
"""
import os
import re
import shutil
import subprocess
import unittest

import gtutil

DIR = os.path.join(gtutil.SOURCE, "completions")
BASH = os.path.join(DIR, "gradtrace.bash")
ZSH = os.path.join(DIR, "_gradtrace")
# the commands `gradtrace --help` lists
COMMANDS = tuple(re.findall(r"^  (\w+) ", subprocess.run(
    [gtutil.GRADTRACE, "--help"], capture_output=True, text=True, timeout=60).stdout, re.M))


def complete(*words):
    """What the bash completion offers for `gradtrace WORDS...` (the last
    word the one being completed), sorted."""
    line = " ".join(("gradtrace",) + words)
    script = ('source "%s"\nCOMP_WORDS=(gradtrace %s)\nCOMP_CWORD=%d\n_gradtrace\n'
              'printf "%%s\\n" "${COMPREPLY[@]}"\n'
              % (BASH, " ".join("'%s'" % w for w in words), len(words)))
    cp = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                        cwd=gtutil.tmpdir(), timeout=60)
    assert cp.returncode == 0, (line, cp.stderr)
    return sorted(w for w in cp.stdout.split("\n") if w)


@unittest.skipUnless(shutil.which("bash"), "no bash")
class Bash(unittest.TestCase):
    def test_commands(self):
        self.assertEqual(complete("d"), ["diagnose"])
        self.assertEqual(complete("s"), ["sql"])
        self.assertEqual(complete(""), sorted(COMMANDS + ("--help", "--version")))

    def test_options_and_values(self):
        self.assertEqual(complete("record", "--k"), ["--keep-last"])
        self.assertEqual(complete("graph", "--format", ""), ["dot", "png", "svg"])
        self.assertEqual(complete("diagnose", "--color", "a"), ["always", "auto"])

    def test_files(self):
        d = gtutil.tmpdir()
        for name in ("run.db", "train.py", "notes.txt"):
            open(os.path.join(d, name), "w").close()
        self.assertIn("run.db", complete("diagnose", ""))
        self.assertNotIn("notes.txt", complete("diagnose", ""))
        self.assertIn("train.py", complete("record", ""))
        self.assertNotIn("run.db", complete("record", ""))
        # after the script, its own arguments: any file
        self.assertIn("notes.txt", complete("record", "train.py", ""))


class EveryOption(unittest.TestCase):
    def test_scripts_know_every_command(self):
        self.assertIn("memory", COMMANDS)
        with open(ZSH) as f:
            zsh = f.read()
        self.assertEqual(complete(""), sorted(COMMANDS + ("--help", "--version")))
        for cmd in COMMANDS:
            self.assertIn("'%s:" % cmd, zsh)
            self.assertIn("    %s)" % cmd, zsh)

    def test_scripts_know_every_option(self):
        with open(BASH) as f:
            bash = f.read()
        with open(ZSH) as f:
            zsh = f.read()
        for cmd in COMMANDS:
            cp = subprocess.run([gtutil.GRADTRACE, cmd, "--help"], capture_output=True,
                                text=True, timeout=60)
            opts = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", cp.stdout))
            opts.discard("--")
            self.assertTrue(opts, cmd)
            for opt in opts:
                self.assertRegex(bash, r"(?<![\w-])%s(?![\w-])" % re.escape(opt),
                                 "bash: %s %s" % (cmd, opt))
                self.assertRegex(zsh, r"(?<![\w-])%s(?![\w-])" % re.escape(opt),
                                 "zsh: %s %s" % (cmd, opt))


if __name__ == "__main__":
    unittest.main()
