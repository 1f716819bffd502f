"""The serving defaults and the cuDNN search choices that both wtconv_serving.tuning.Tuning and the command line's
help show, in a module that imports nothing (the command line builds its parsers without numpy). docs/serving.md,
"Tuning", says how each was chosen."""

# Model instances per GPU. On an H200, WTConvNeXt-T fp16 at 256 requests in flight: 2 instances served 3,400-4,600
# images/s, 3 about 5,100, 4 6,000-6,800 (each instance spends about two thirds of an execution on host copies of the
# batch; the others keep the GPU busy meanwhile).
GPU_INSTANCES = 4
# ONNX Runtime CUDA EP's cudnn_conv_algo_search; "auto": EXHAUSTIVE under CUDA graphs (a bucket's plan is searched
# once, at capture), HEURISTIC when eager (every change of batch size re-plans; 14-17 ms instead of 93-115 ms).
CUDNN_SEARCHES = ("auto", "EXHAUSTIVE", "HEURISTIC", "DEFAULT")
CUDNN_SEARCH = "auto"
# Requests waiting in Triton's queue beyond which the next is refused at once, and how long one may wait (ms); 0: no
# limit, the default. Any limit is a queue policy, which turns off the prefetching of Triton's dynamic batcher
# (core src/scheduler_utils.cc: only a queue without timeout, timeout override or size supports it): the batcher then
# waits for a busy instance on its condition variable under a mutex of its own (src/dynamic_batch_scheduler.cc,
# WaitForPayloadSlotAvailable), whose wake-up can be missed, and sleeps out its 500 ms timeout. Measured on a 2-core
# CPU, the shipped model, 16 requests in flight: p99 525-543 ms with 512 / 5000, 22 ms without (docs/serving.md,
# "Tuning").
MAX_QUEUE_SIZE = 0
QUEUE_TIMEOUT_MS = 0
