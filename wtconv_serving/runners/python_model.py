"""What the served model does inside Triton's Python backend (model.py hands over to ServedModel).

Triton's core has already checked each request against config.pbtxt (input name, datatype, dims, batch size <=
max_batch_size) before ``execute`` sees it. The dynamic batcher hands ``execute`` several requests at once: the
runner copies each request's rows once into its batch buffer, runs the batch (padded up to its bucket on a GPU) and
returns one output per request, answered in the order received (wtconv_serving.runners.batch_runner). A failure while
running
answers every request of that batch with the error and leaves the model serving.

Tensors cross the backend boundary through DLPack (``np.from_dlpack`` in, ``Tensor.from_dlpack`` out), not
``as_numpy()`` / ``Tensor(name, array)``: the backend's compiled helpers read NumPy 1's array-descriptor layout,
and under NumPy 2 they see garbage item sizes (inputs read as repeated first elements, outputs sent with 0
bytes). DLPack describes the memory itself and is correct with either NumPy. A GPU instance's config lets inputs
through where they are (FORCE_CPU_ONLY_INPUT_TENSORS "no"): an input a client placed in GPU memory (CUDA shared
memory) arrives as a CUDA tensor (``torch.from_dlpack``), goes into the runner as it is, and such a batch is answered
with CUDA tensors, which Triton copies where the client wants them (wtconv_serving.runners.batch_runner). Host
outputs are handed over as PyTorch tensors too (``torch.from_numpy``, no copy): the backend renames the DLPack
capsule it consumes to a name NumPy's capsule destructor does not expect, so a NumPy capsule prints an "unraisable"
traceback for every response, while PyTorch's destructor leaves a renamed capsule alone, as the DLPack protocol says.

The instance runs where Triton placed it (``instance_device``): a GPU instance on the GPU of its
``model_instance_device_id``, where its runner loads the model and makes its own buffers and CUDA graphs.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)


class ServedModel:
    def __init__(self, args: dict, config: dict, parameters: dict, pb_utils):
        from wtconv_serving.runners.runtimes import load_runtime, make_runner
        from wtconv_serving.tuning import Tuning

        self.pb = pb_utils
        self.instance = args.get("model_instance_name") or args["model_name"]
        max_batch = int(config.get("max_batch_size", 0))
        self.batching = max_batch > 0
        version_dir = Path(args["model_repository"]) / args["model_version"]
        onnx = version_dir / parameters["onnx_file"] if parameters.get("onnx_file") else None
        engine = version_dir / parameters["engine_file"] if parameters.get("engine_file") else None
        plugin = _model_file(args, parameters.get("plugin"))
        ort_library = _model_file(args, parameters.get("ort_library"))
        gpu = instance_device(args)
        threads = int(parameters.get("threads") or 0)
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]
        dims = [int(d) for d in config["input"][0]["dims"]]
        start = time.perf_counter()
        model = load_runtime(
            parameters.get("runtime", "auto"),
            onnx_path=onnx,
            engine_path=engine,
            plugin=plugin,
            device=0 if gpu is None else gpu,
            threads=threads,
            ort_device=parameters.get("ort_device") or "cpu",
            ort_library=ort_library,
        )
        tuning = Tuning.from_parameters(parameters).with_max_batch(max_batch)
        self.runner = make_runner(model, tuning=tuning, input_dims=dims if self.batching else None)
        self.logger = pb_utils.Logger
        self.placements: set = set()  # where inputs have arrived (said once each in the log)
        described = getattr(self.runner, "description", None)
        where = "the CPU" if gpu is None else f"GPU {gpu}"
        self.logger.log_info(
            f"{args['model_name']}: runtime {self.runner.name}, {f'{described}, ' if described else ''}input "
            f"{self.input_name} {self.runner.input_dtype}, output {self.output_name} {self.runner.output_dtype}; "
            f"instance {self.instance} on {where} (loaded in {time.perf_counter() - start:.1f} s)"
        )
        if self.runner.plan is not None:  # how its batches run on the buckets (bucket_plan)
            self.logger.log_info(f"{args['model_name']}: instance {self.instance}: {self.runner.plan.describe()}")

    def execute(self, requests):
        pb = self.pb
        parts, errors = {}, {}
        for index, request in enumerate(requests):
            tensor = pb.get_input_tensor_by_name(request, self.input_name)
            if tensor is None:
                errors[index] = f"the request has no input named {self.input_name!r}"
                continue
            x = _from_dlpack(tensor)  # not as_numpy(): see the module docstring
            self._note_placement(x)
            if np.dtype(str(x.dtype).replace("torch.", "")) != self.runner.input_dtype:
                errors[index] = f"input {self.input_name!r} must be {self.runner.input_dtype}, got {x.dtype}"
                continue
            parts[index] = x
        good = [i for i in range(len(requests)) if i not in errors]
        outputs = {}
        if good:
            try:
                if self.batching:
                    outputs = dict(zip(good, self.runner.run([parts[i] for i in good]), strict=True))
                else:
                    outputs = {i: self.runner.run([parts[i]])[0] for i in good}
            except Exception as error:  # answer the batch with the error; the model keeps serving
                message = f"{self.runner.name} failed on this batch: {type(error).__name__}: {error}"
                self.logger.log_error(message)
                errors.update({i: message for i in good})
        responses = []
        for index in range(len(requests)):
            if index in errors:
                responses.append(pb.InferenceResponse(output_tensors=[], error=pb.TritonError(errors[index])))
            else:
                tensor = pb.Tensor.from_dlpack(self.output_name, self._output(outputs[index]))
                responses.append(pb.InferenceResponse(output_tensors=[tensor]))
        return responses

    def _output(self, y):
        """A DLPack producer for one answer: a CUDA tensor as it is (a contiguous view of the batch's own copy), a
        NumPy array in the output's dtype through PyTorch (see the module docstring)."""
        if not isinstance(y, np.ndarray):
            return y
        return _dlpack_source(np.ascontiguousarray(y.astype(self.runner.output_dtype, copy=False)))

    def _note_placement(self, x) -> None:
        """Say in the log, once each, where this instance's inputs arrive."""
        where = "the host" if isinstance(x, np.ndarray) else str(x.device)
        if where in self.placements:
            return
        self.placements.add(where)
        how = "one copy into the staging buffer" if where == "the host" else "DLPack into the runner, no host copy"
        self.logger.log_info(f"{self.instance}: inputs arrive on {where} ({how})")

    def finalize(self) -> None:
        """Called once the instance has finished its last batch (the server unloads the model); the log line tells
        the launcher the answers are computed (wtconv_serving.server.launcher.FINALIZED)."""
        self.runner = None
        self.logger.log_info(f"{self.instance}: finalized")


def instance_device(args: dict) -> int | None:
    """The GPU of a model instance from the args Triton gives ``initialize``: for a GPU instance its
    ``model_instance_device_id`` (the GPU of its instance group Triton placed it on), for a KIND_MODEL instance the
    same id (0: the runtime places it), None for a CPU instance. Triton names the kind "GPU", "CPU" or "MODEL"."""
    kind = str(args.get("model_instance_kind") or "").upper().removeprefix("KIND_")
    if kind == "CPU":
        return None
    return int(args.get("model_instance_device_id") or 0)


def _from_dlpack(tensor):
    """A request's input: a NumPy array over the backend's host memory, or a CUDA tensor when a client placed it in
    GPU memory (the config lets such inputs through, FORCE_CPU_ONLY_INPUT_TENSORS)."""
    if tensor.is_cpu():
        return np.from_dlpack(tensor)
    import torch

    return torch.from_dlpack(tensor)


def _model_file(args: dict, value: str | None) -> str | None:
    """A file the config's parameter ``value`` names: as given when absolute, else in the model's folder (Triton
    passes that folder as ``model_repository``), where the repository writer copies the libraries it carries."""
    if not value:
        return None
    return value if os.path.isabs(value) else str(Path(args["model_repository"]) / value)


def _dlpack_source(array: np.ndarray):
    """A DLPack producer for ``array`` whose capsule tolerates the backend's renaming (see the module docstring)."""
    try:
        import torch
    except ImportError:
        return array
    return torch.from_numpy(array)
