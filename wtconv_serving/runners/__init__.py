"""What runs inside Triton's Python backend: the runtime choice and the model loaded once (``runtimes.py``:
load_runtime, make_runner), what every runner shares (``batch_runner.py``), one module per runtime with its loaded
model and its runner (``tensorrt_runner.py``, ``torch_runner.py``, ``ort_runner.py``),
the served model (``python_model.py``) and the ``model.py`` template copied into each repository."""
