"""Post-processing on the CPU: turn the tensors at the Edge TPU boundary into poses, masks, boxes and classes.

Each post-processor is built from the model (options, anchors, weights and quantization are read from the
file) and consumes a backend's output dict ``{tensor name: raw quantized array}``. See docs/postprocessing.md.
"""
