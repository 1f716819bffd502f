"""What runs inside Triton's Python backend: the runtime choice (``runtimes.py``: make_runner), what every runner
shares (``batch_runner.py``), one runner per runtime (``tensorrt_runner.py``, ``torch_runner.py``, ``ort_runner.py``),
the served model (``python_model.py``) and the ``model.py`` template copied into each repository."""
