"""The serving defaults, for the command line's parsers and help (built before any heavy import): the values
wtconv_serving.tuning.Tuning starts from, read from wtconv_serving.defaults, which imports nothing."""

from wtconv_serving.defaults import CUDNN_SEARCH, CUDNN_SEARCHES, GPU_INSTANCES, MAX_QUEUE_SIZE, QUEUE_TIMEOUT_MS

__all__ = ["CUDNN_SEARCH", "CUDNN_SEARCHES", "GPU_INSTANCES", "MAX_QUEUE_SIZE", "QUEUE_TIMEOUT_MS"]
