"""PyTorch under the shim (ci/gpu-validate.sh): the container's memory limit as PyTorch sees it.

    python3 torch_check.py LIMIT_BYTES

Prints key=value lines and RESULT=PASS/FAIL. Checks: torch.cuda.mem_get_info() total == LIMIT;
tensors that fit are allocated and computed on correctly; a tensor larger than what is left raises
PyTorch's out-of-memory error (torch.OutOfMemoryError); after freeing, memory can be used again.
"""

import sys

import torch

GIB = 1 << 30


def kv(k, v):
    print(f"{k}={v}", flush=True)


def main():
    limit = int(sys.argv[1])
    oom_type = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    checks = {}
    kv("torch_version", torch.__version__)
    kv("cuda_available", int(torch.cuda.is_available()))
    if not torch.cuda.is_available():
        kv("RESULT", "FAIL")
        return 1
    kv("device_name", torch.cuda.get_device_name(0))
    kv("props_total_memory", torch.cuda.get_device_properties(0).total_memory)
    free, total = torch.cuda.mem_get_info()
    kv("mem_get_info.free", free)
    kv("mem_get_info.total", total)
    checks["mem_get_info_total_is_limit"] = total == limit

    # Tensors that fit: 1 GiB + a 4096² matmul, checked against the CPU.
    a = torch.ones(GIB, dtype=torch.uint8, device="cuda")
    checks["small_tensor_ok"] = int(a.sum().item()) == GIB
    x = torch.randn(1024, 1024, device="cuda")
    y = (x @ x.T).cpu()
    ref = x.cpu() @ x.cpu().T
    checks["matmul_ok"] = torch.allclose(y, ref, rtol=1e-3, atol=1e-2)
    free1, _ = torch.cuda.mem_get_info()
    kv("free_after_small", free1)

    # A tensor that does not fit in what is left of the limit.
    want = free1 + GIB // 2
    kv("too_big_bytes", want)
    try:
        big = torch.empty(want, dtype=torch.uint8, device="cuda")
        big.fill_(1)
        torch.cuda.synchronize()
        kv("too_big", "allocated")
        checks["too_big_raises_oom"] = False
        del big
    except oom_type as e:
        kv("too_big", f"{type(e).__name__}")
        checks["too_big_raises_oom"] = True
    # Larger than the whole limit.
    try:
        huge = torch.empty(limit + GIB, dtype=torch.uint8, device="cuda")
        kv("over_limit", "allocated")
        checks["over_limit_raises_oom"] = False
        del huge
    except oom_type as e:
        kv("over_limit", f"{type(e).__name__}")
        checks["over_limit_raises_oom"] = True

    # Free and reuse.
    del a
    torch.cuda.empty_cache()
    free2, _ = torch.cuda.mem_get_info()
    kv("free_after_release", free2)
    b = torch.ones(2 * GIB, dtype=torch.uint8, device="cuda")
    checks["reuse_after_free_ok"] = int(b.sum().item()) == 2 * GIB and free2 > free1
    del b
    torch.cuda.empty_cache()

    for k, v in checks.items():
        kv(f"check.{k}", "PASS" if v else "FAIL")
    ok = all(checks.values())
    kv("RESULT", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
