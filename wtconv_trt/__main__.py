"""``python -m wtconv_trt`` runs the ``wtconv-trt`` command."""

import sys

from wtconv_trt.cli import main

sys.exit(main())
