"""What a rank's process does with its cores and memory: the thread budget, numba kernels
(compiled ahead, with numpy fallbacks), the NaN/Inf counter, the allocator's options."""
