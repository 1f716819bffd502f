"""Triton Python-backend model: copied as ``<repository>/<model>/1/model.py`` by
wtconv_serving.repositories.python_backend.

Triton's backend stub embeds its own Python with an isolated ``sys.path`` (``PYTHONPATH`` is ignored), so this
file imports nothing from the environment at module level: ``initialize`` first puts the site-packages named by
the config parameter ``site_packages`` in front of ``sys.path`` (``.pth`` files included, so an editable install
is found), then hands over to wtconv_serving.runners.python_model, which does the work.
"""

import json
import os
import site
import sys


def _add_site_packages(paths):
    before = list(sys.path)
    for path in paths:
        if path and os.path.isdir(path):
            site.addsitedir(path)
    added = [p for p in sys.path if p not in before]
    sys.path[:] = added + before  # the environment's packages win over the stub's system ones


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        _add_site_packages(parameters.get("site_packages", "").split(os.pathsep))
        import triton_python_backend_utils as pb_utils

        from wtconv_serving.runners.python_model import ServedModel

        self.impl = ServedModel(args, config, parameters, pb_utils)

    def execute(self, requests):
        return self.impl.execute(requests)

    def finalize(self):
        impl = getattr(self, "impl", None)
        if impl is not None:
            impl.finalize()
