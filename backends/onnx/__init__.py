"""xmge's optimised tensor IR for the runtimes xmge is compared with (``bench/bench_x86.py``,
``make demo``): an ONNX model (:func:`backends.onnx.export.to_onnx`) and a PyTorch closure
(:func:`backends.onnx.torch_runner.torch_runner`), the *same* graph and weights in both."""
