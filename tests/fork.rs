//! fork: a child gets its own slot, owns none of the parent's usage, and gives its slot back at
//! exit; the parent's accounting is untouched (docs/hami-contract.md §3.9, docs/shim-notes.md §12).

mod common;
use common::*;

#[test]
fn forked_child_takes_its_own_slot_and_gives_it_back() {
    let sb = Sandbox::new("fork");
    let out = sb.run(artifacts().bin("fork_client")).shim(true).env("CUDA_DEVICE_MEMORY_LIMIT", "1g").go();
    out.ok();
    let n = |k: &str| out.val(k).parse::<i64>().unwrap_or_else(|_| panic!("{k}: {}", out.dump()));
    assert_eq!(n("parent_proc_num"), 1, "{}", out.dump());
    let parent_used = n("parent_used_before");
    assert!(parent_used >= 64 << 20, "parent's 64 MiB counted: {}", out.dump());
    // Slots are claimed two apart (docs/design.md "Memory ledger"): the child's is slot 2.
    assert_eq!(n("child_proc_num"), 3, "the child took a slot of its own: {}", out.dump());
    assert_eq!(n("child_own_used"), 0, "the child owns none of the parent's memory: {}", out.dump());
    assert_eq!(n("child_sees_parent_used"), parent_used, "parent's slot untouched by the child: {}", out.dump());
    assert_eq!(n("child_nvml_used"), parent_used, "the child's NVML view is the container's usage: {}", out.dump());
    assert_eq!(n("child_exit"), 0);
    assert_eq!(n("after_proc_num"), 1, "the child's slot was given back at exit: {}", out.dump());
    assert_eq!(n("parent_used_after"), parent_used, "{}", out.dump());
}

/// A context is device memory like any other: one that does not fit under the container's limit
/// is refused with CUDA_ERROR_OUT_OF_MEMORY (as on a full GPU) and leaves nothing counted.
#[test]
fn context_that_does_not_fit_the_limit_is_refused() {
    let sb = Sandbox::new("ctx-refused");
    let out = sb
        .run(artifacts().bin("fork_client"))
        .shim(true)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "100m")
        .env("VGPU_SIM_CTX_MIB", "256")
        .go();
    assert_eq!(out.code, Some(1), "{}", out.dump());
    assert_eq!(out.val("error"), "init", "{}", out.dump());
    assert!(out.stderr.contains("context on device 0 refused"), "{}", out.dump());
    let region = std::fs::read(sb.region()).expect("region file");
    let proc_num = i32::from_le_bytes(region[2_008_896..2_008_900].try_into().unwrap());
    assert_eq!(proc_num, 0, "the process detached at exit");
    // And with room for it, the same program runs.
    let sb2 = Sandbox::new("ctx-fits");
    sb2.run(artifacts().bin("fork_client"))
        .shim(true)
        .env("CUDA_DEVICE_MEMORY_LIMIT", "400m")
        .env("VGPU_SIM_CTX_MIB", "256")
        .go()
        .ok();
}
