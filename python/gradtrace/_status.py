"""What `gradtrace record` says while a run is long: a one-line status on
stderr when stderr is a terminal, redrawn in place (elapsed time, backward
calls, events, trace size, and past LARGE bytes a hint at --keep-last and
--max-size), and, when closing the trace takes more than a second, a line
saying what closing does.

The status line is drawn at most RATE times a second, and only at the
start of a line: each write the script makes to a terminal stream
(sys.stdout, sys.stderr) first clears it, so the script's output reads as
without recording; it comes back after the write once the script's output
ends a line. Output written below Python (C code's printf) can land beside
it: the next redraw clears the line.
"""
import os
import sys
import threading
import time

RATE = 4  # redraws a second, at most
LARGE = 100 * 1024 * 1024  # trace bytes past which the line hints at the options
CLOSE_NOTE_AFTER = 1.0  # seconds closing takes before it is said


def _size(n):
    """n bytes as '512 B', '3.4 MB'."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return ("%d %s" if unit == "B" else "%.1f %s") % (n, unit)
        n /= 1024.0


def _count(n):
    """n as '950', '12.3 k', '4.5 M'."""
    if n < 1000:
        return "%d" % n
    if n < 1000000:
        return "%.1f k" % (n / 1e3)
    return "%.1f M" % (n / 1e6)


def _elapsed(s):
    s = int(s)
    if s >= 3600:
        return "%d:%02d:%02d" % (s // 3600, s // 60 % 60, s % 60)
    return "%d:%02d" % (s // 60, s % 60)


def trace_bytes(path):
    """Bytes of the trace at path and of what it has beside it (its
    write-ahead log, its row log); 0 if none can be read."""
    n = 0
    for suffix in ("", "-wal", "-gtlog"):
        try:
            n += os.stat(path + suffix).st_size
        except OSError:
            pass
    return n


def line(elapsed, calls, events, size, in_memory=False):
    """The status text (without the carriage return and the clearing)."""
    parts = ["gradtrace: recording %s" % _elapsed(elapsed),
             "%s backward call%s" % (_count(calls), "" if calls == 1 else "s")]
    if events is not None:
        parts.append("%s events" % _count(events))
    if in_memory:
        parts.append("last calls kept in memory")
    else:
        parts.append(_size(size))
        if size >= LARGE:
            parts.append("large: --keep-last N keeps the last N calls, --max-size caps it")
    return " · ".join(parts)


class StatusLine:
    """The live status of Recording rec on the terminal at file descriptor
    fd (stderr). start() draws it and hooks the script's terminal streams;
    stop() clears it and unhooks them. Never raises into the script."""

    def __init__(self, rec, fd=2):
        self.rec = rec
        self.fd = fd
        self.pid = os.getpid()
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.shown = False  # the line is on the terminal now
        self.at_line_start = True  # the script's output ended a line
        self.last_draw = 0.0
        self.stopped = threading.Event()
        self.hooked = []
        self.width = 0
        self.thread = None

    def start(self):
        for stream in (sys.stdout, sys.stderr):
            self._hook(stream)
        self.thread = threading.Thread(target=self._loop, name="gradtrace-status",
                                       daemon=True)
        self.thread.start()

    def _hook(self, stream):
        """Send stream's writes through a clearing of the line, when it is a
        terminal (an instance attribute over the type's write method)."""
        try:
            if not stream.isatty() or "write" in vars(stream):
                return
            orig = stream.write
        except Exception:
            return
        status = self

        def write(text):
            if os.getpid() != status.pid:
                return orig(text)
            status.clear()
            n = orig(text)
            if text:
                status.at_line_start = str(text).endswith("\n")
                if status.at_line_start:
                    try:
                        stream.flush()
                    except Exception:
                        pass
                    status.draw()
            return n

        try:
            stream.write = write
        except Exception:
            return
        self.hooked.append(stream)

    def _loop(self):
        while not self.stopped.wait(1.0 / RATE):
            self.draw()

    def _text(self):
        r = self.rec._rec
        events = getattr(r, "seq", None) if r is not None else None
        text = line(time.monotonic() - self.t0, self.rec._done_calls, events,
                    trace_bytes(self.rec.file), bool(self.rec.keep_last))
        try:
            cols = os.get_terminal_size(self.fd).columns
        except OSError:
            cols = 0
        return text[:cols - 1] if cols > 20 else text  # 0: a terminal of no known size

    def draw(self, force=False):
        """Redraw the line (at most RATE times a second, unless force)."""
        if self.stopped.is_set() or os.getpid() != self.pid:
            return
        with self.lock:
            now = time.monotonic()
            if not self.at_line_start or (not force and now - self.last_draw < 1.0 / RATE):
                return
            self.last_draw = now
            try:
                text = self._text()
                os.write(self.fd, ("\r\x1b[K" + text).encode("utf-8", "replace"))
                self.shown = True
            except Exception:
                pass

    def clear(self):
        """Take the line off the terminal (if it is there)."""
        with self.lock:
            if self.shown:
                self.shown = False
                try:
                    os.write(self.fd, b"\r\x1b[K")
                except OSError:
                    pass

    def stop(self):
        self.stopped.set()
        for stream in self.hooked:
            try:
                del stream.write
            except Exception:
                pass
        self.hooked = []
        if os.getpid() == self.pid:
            self.clear()


class CloseNote:
    """One line on stderr saying what closing the trace does, printed only
    if closing takes more than CLOSE_NOTE_AFTER seconds. Use as a context
    manager around the close."""

    def __init__(self, events, path):
        self.events = events
        self.path = path
        self.done = threading.Event()
        self.thread = None

    def _wait(self):
        if self.done.wait(CLOSE_NOTE_AFTER):
            return
        what = "%s events" % _count(self.events) if self.events else "its last rows"
        try:
            sys.stderr.write("gradtrace: closing the trace %s: writing %s and its indexes...\n"
                             % (self.path, what))
            sys.stderr.flush()
        except Exception:
            pass

    def __enter__(self):
        self.thread = threading.Thread(target=self._wait, name="gradtrace-close", daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        return False
