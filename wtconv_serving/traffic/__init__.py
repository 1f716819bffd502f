"""Traffic against a running server (``wtconv-trt serve --load-test``): the answer check with every response matched
to its request (``check.py``), the timed sweep from several client processes (``sweep.py``), and the trial that runs
both and times the served runner directly (``trial.py``)."""
