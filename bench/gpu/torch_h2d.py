"""PyTorch's own host-to-device copies of one batch, next to stoker_gpu_check's figures: pageable
.to("cuda"), pin_memory() then .to("cuda", non_blocking=True) (pin-after), and from memory pinned
in advance. Prints a Markdown table (part of bench/results/gpu.md)."""
import statistics
import time

import torch


def gbps(fn, nbytes, count):
    fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(count):
            fn()
        torch.cuda.synchronize()
        runs.append(nbytes * count / (time.perf_counter() - t0) / 1e9)
    return statistics.median(runs)


def main():
    print("## PyTorch's own copies (same batches)\n")
    print(f"torch {torch.__version__}; GB/s, median of 3 runs of back-to-back copies.\n")
    print("| batch | pinned in advance | pageable `.to('cuda')` | `pin_memory()` then "
          "`.to('cuda', non_blocking=True)` |")
    print("| --- | ---: | ---: | ---: |")
    for name, dtype, count in (("256x224x224x3 uint8 (38.5 MB)", torch.uint8, 24),
                               ("256x3x224x224 float32 (154 MB)", torch.float32, 8)):
        sources = [torch.full((256, 224, 224, 3), i + 1, dtype=dtype) for i in range(4)]
        nbytes = sources[0].numel() * sources[0].element_size()
        pinned = sources[0].pin_memory()
        state = {"i": 0}

        def next_source():
            state["i"] += 1
            return sources[state["i"] % 4]

        ceiling = gbps(lambda: pinned.to("cuda", non_blocking=True), nbytes, count)
        pageable = gbps(lambda: next_source().to("cuda"), nbytes, count)
        pin_after = gbps(lambda: next_source().pin_memory().to("cuda", non_blocking=True), nbytes,
                         count)
        print(f"| {name} | {ceiling:.1f} GB/s | {pageable:.1f} GB/s | {pin_after:.1f} GB/s |")
    print()


if __name__ == "__main__":
    main()
