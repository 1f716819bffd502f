"""The server: finding, preparing, starting, watching and stopping ``tritonserver`` (``launcher.py``)."""
