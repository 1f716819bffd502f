"""``python -m wtconv_trt`` runs the ``wtconv-trt`` command."""

from wtconv_trt.cli import run_command

run_command()
