"""The build's progress on a terminal, fed by TensorRT's IProgressMonitor (tensorrt_api.ProgressMonitor): nested
build phases as text bars, redrawn in place on a terminal, one line per finished top-level phase elsewhere."""

from __future__ import annotations

import sys
import time


class ProgressBoard:
    """Nested build phases as text bars. On a terminal the bars are redrawn in place (ANSI escapes, as
    TensorRT's samples/python/simple_progress_monitor does); otherwise one line per finished top-level phase,
    so logs stay readable. step_complete returns False after Ctrl-C, which makes TensorRT cancel the build."""

    WIDTH = 20

    def __init__(self, stream=None, interactive=None):
        self.stream = stream or sys.stderr
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.phases = {}  # name -> [indent, steps, num_steps, start time]
        self.cancelled = False
        self._drawn = 0

    def phase_start(self, name, parent, num_steps):
        try:
            indent = self.phases[parent][0] + 1 if parent is not None and parent in self.phases else 0
            self.phases[name] = [indent, 0, max(int(num_steps), 1), time.monotonic()]
            self._redraw()
        except KeyboardInterrupt:
            self.cancelled = True

    def step_complete(self, name, step) -> bool:
        try:
            if name in self.phases:
                self.phases[name][1] = int(step)
            self._redraw()
        except KeyboardInterrupt:
            self.cancelled = True
        return not self.cancelled

    def phase_finish(self, name):
        try:
            phase = self.phases.pop(name, None)
            if phase is not None and not self.interactive and phase[0] == 0 and not self.cancelled:
                self.stream.write(f"{self.bar(phase[2], phase[2])} {name} ({time.monotonic() - phase[3]:.1f} s)\n")
                self.stream.flush()
            self._redraw()
        except KeyboardInterrupt:
            self.cancelled = True

    @classmethod
    def bar(cls, steps, num_steps) -> str:
        done = int(cls.WIDTH * min(max(steps, 0), num_steps) / max(num_steps, 1))
        return "[" + "=" * done + "-" * (cls.WIDTH - done) + "]"

    def lines(self) -> list:
        return [
            f"{'  ' * indent}{self.bar(steps, n)} {name} {steps}/{n}"
            for name, (indent, steps, n, _) in self.phases.items()
        ]

    def _redraw(self):
        if not self.interactive:
            return
        out = []
        if self._drawn:
            out.append(f"\x1b[{self._drawn}A")  # back to the first bar
        lines = self.lines()
        for line in lines:
            out.append("\x1b[2K" + line + "\n")
        for _ in range(max(self._drawn - len(lines), 0)):
            out.append("\x1b[2K\n")
        extra = max(self._drawn - len(lines), 0)
        if extra:
            out.append(f"\x1b[{extra}A")
        self._drawn = len(lines)
        self.stream.write("".join(out))
        self.stream.flush()

    def close(self):
        self.phases.clear()
        self._redraw()
