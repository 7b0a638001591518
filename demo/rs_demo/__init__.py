"""rs-demo: the models of rs's demo and tests, kept out of the runtime package.

`rs:demo-vlm` (`rs_demo.demo_model`, trained by `rs_demo.train_demo`) is what `make demo` samples with;
`rs:tiny-vlm` (`rs_demo.tiny_model`) and `rs:tiny-qwen3vl` (`rs_demo.tiny_qwen3vl`) are tiny random models the
tests serve for real. rs finds them through the `rs.models` entry point (`rs_demo.models`), never by name.
"""
