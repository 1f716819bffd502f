"""Progress of long jobs through logging (wtconv_core/progress.py) and its display by the command line."""

import logging

from wtconv_core.progress import Progress, show_progress, track


def test_steps_are_logged_with_counts(caplog):
    logger = logging.getLogger("wtconv_export.test_progress")
    with caplog.at_level(logging.INFO, logger="wtconv_export.test_progress"):
        assert list(track(["a", "b", "c"], logger, "bench")) == ["a", "b", "c"]
        Progress(logger, "export", 2, estimate=False).step("folded")
    messages = [r.getMessage() for r in caplog.records]
    assert [m.split(" (")[0] for m in messages] == ["bench 1/3", "bench 2/3", "bench 3/3", "export 1/2"]
    assert "s left" in messages[0] and "s left" not in messages[2]
    assert messages[3].endswith(": folded") and "s left" not in messages[3]


def test_show_progress_writes_to_the_current_stderr(capsys):
    show_progress()
    show_progress()  # idempotent: one handler
    logging.getLogger("wtconv_export.progress_check").info("step one")
    assert capsys.readouterr().err.count("step one") == 1
    logging.getLogger("trt_engine.progress_check").debug("hidden")
    assert "hidden" not in capsys.readouterr().err
