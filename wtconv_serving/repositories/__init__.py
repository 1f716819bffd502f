"""Writing Triton model repositories: the one model-configuration writer (``triton_config.py``), what every repository
shares (``repository.py``: the model folder planned whole and written at the end, config.pbtxt with labels.txt,
serve.sh), and one module per backend
(``tensorrt_backend.py``, ``onnxruntime_backend.py``, ``python_backend.py``: the folder our runners serve from)."""
