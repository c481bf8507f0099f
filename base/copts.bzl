"""Compiler options shared by BUILD files."""

# For the libraries whose loops are the model's arithmetic (kernels, int4
# quantization, expert affinity, sampling). Bazel's default fastbuild mode
# compiles at -O0, where a SIMD intrinsic is a function call and a tile
# kernel runs 10-30x slower; every test that runs the model (the invariance
# matrices, the differential and parity tests) then spends its time there.
# -O2 on these few files costs seconds of compile and saves minutes of test.
# Under --config=opt the command line's -O3 is left alone (a target's copts
# come after the command line's, so adding -O2 there would lower it), and the
# sanitizer configs get -O2 over their -O1, which they tolerate.
HOT_LOOP_COPTS = select({
    "//base:compilation_mode_opt": [],
    "//conditions:default": ["-O2"],
})
