"""The serving defaults that both wtconv_serving.tuning.Tuning and the command line's help show, in a module that
imports nothing (the command line builds its parsers without numpy). docs/serving.md, "Tuning", says how each was
chosen."""

# Model instances per GPU. On an H200, WTConvNeXt-T fp16 at 256 requests in flight: 2 instances served 3,400-4,600
# images/s, 3 about 5,100, 4 6,000-6,800 (each instance spends about two thirds of an execution on host copies of the
# batch; the others keep the GPU busy meanwhile).
GPU_INSTANCES = 4
CUDNN_SEARCH = "auto"  # ONNX Runtime's cudnn_conv_algo_search: wtconv_serving.tuning.CUDNN_SEARCHES
MAX_QUEUE_SIZE = 512  # requests waiting in Triton's queue beyond which the next is refused at once
QUEUE_TIMEOUT_MS = 5000  # a request waiting longer in the queue is refused
