"""The training log as a notebook or a terminal shows it.

The engine writes what the command prints: the plan, evaluation lines, and a
progress line redrawn in place ("\\r[=====>   ] 12/40 loss ..."), each
redraw one flush, at most 10 a second. Here: in a Jupyter notebook the
progress line is one display that is updated (IPython is used when it is
there, never required); on a terminal the text goes out as it is; anywhere
else (a log file) the progress line is written as a line every 10 seconds
and when it ends. Everything but the redraws is kept as the run's log.
"""
import sys
import time


def _notebook_display():
    """IPython's display function when running in a notebook kernel, else None."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    try:
        shell = ipython.get_ipython()
        if shell is None or getattr(shell, "kernel", None) is None:
            return None
        from IPython.display import display
    except Exception:  # an IPython too old or half-initialised: plain text then
        return None
    return display


class Display:
    def __init__(self, show=True, stream=None):
        self.show = show
        self.stream = stream or sys.stdout
        self.display = _notebook_display() if show else None
        self.terminal = show and self.display is None and _isatty(self.stream)
        self.handle = None
        self.bar = ""          # the progress line as last drawn
        self.bar_open = False  # drawn and not yet ended by a newline
        self.bar_written = 0.0
        self.lines = []        # the log: text and each finished progress line

    @property
    def log(self):
        return "".join(self.lines) + (self.bar + "\n" if self.bar_open else "")

    def __call__(self, text):
        """One flush of the engine's log."""
        if self.terminal:
            self.stream.write(text)
            self.stream.flush()
        pieces = text.split("\r")
        self._text(pieces[0])
        for piece in pieces[1:]:
            bar, newline, rest = piece.partition("\n")
            self._bar(bar.rstrip())
            if newline:
                self._text("\n" + rest)

    def _text(self, text):
        if not text:
            return
        if self.bar_open and text.startswith("\n"):  # the newline that ends the progress line
            self._end_bar()
            text = text[1:]
        elif self.bar_open:
            self._end_bar()
        if not text:
            return
        self.lines.append(text)
        if self.show and not self.terminal:
            self.stream.write(text)
            self.stream.flush()

    def _bar(self, bar):
        self.bar = bar
        self.bar_open = True
        if not self.show or self.terminal:
            return
        if self.display is not None:
            content = {"text/plain": bar}
            if self.handle is None:
                self.handle = self.display(content, raw=True, display_id=True)
            else:
                self.handle.update(content, raw=True)
        elif time.monotonic() - self.bar_written >= 10.0:
            self.bar_written = time.monotonic()
            self.stream.write(bar + "\n")
            self.stream.flush()

    def _end_bar(self):
        self.lines.append(self.bar + "\n")
        self.bar_open = False
        if self.show and self.display is None and not self.terminal:
            self.stream.write(self.bar + "\n")
            self.stream.flush()
        self.handle = None  # the next progress line is a new display


def _isatty(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
