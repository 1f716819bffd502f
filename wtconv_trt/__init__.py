"""The ``wtconv-trt`` command line: argument parsing and printing on top of the libraries.

``wtconv_export`` (PyTorch reference, export, ONNX validation) and ``trt_engine`` (TensorRT engines, serving)
never import this package; it imports them. One module per subcommand in ``commands/``.
"""
