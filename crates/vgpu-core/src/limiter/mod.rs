//! The compute (SM-utilisation) limiter's controller logic, free of CUDA calls so it can be
//! unit-tested. The shim (`src/compute/`) feeds it clocks, launches, timing samples and NVML data.
//! Design and reasoning: docs/design.md, "Compute limiter".
//!
//! * [`bucket`]: the container-wide token bucket of device time per device (region extension),
//!   refilled lazily at L × wall time, admission with debt.
//! * [`burst`]: the effective rate in [limit, ceiling] (the limit as a guarantee, idle time
//!   shared up to `CUDA_DEVICE_SM_CEILING`).
//! * [`cost`]: per-signature cost prediction from sparse timing samples, reconciliation of
//!   guessed charges.
//! * [`cost::lowcost`]: the container's lowest measured cost per launch shape, shared by its processes
//!   (a cap on estimates a process has not confirmed yet).
//! * [`correction`]: the slow outer loop correcting this process's charges from NVML.
//! * [`feedback`]: HAMi's `utilization_switch` / `recent_kernel` / `last_kernel_time` and the
//!   `GPU_CORE_UTILIZATION_POLICY` rules.
//! * [`nvmlspan`]: one NVML per-process answer weighed once into a [`nvmlspan::Span`] (busy time
//!   per PID), read by the correction and by the burst step; shares derived from it.
//! * [`words`]: values of the per-device words of the region extension (the sensor in use).
//!
//! The host PID that keys NVML's per-process figures is resolved outside the limiter
//! ([`crate::hostpid`]).
//!
//! # Periodic loops and tuning knobs
//!
//! Every loop and every time constant or tuning knob of the limiter (this module and
//! `src/compute/`): what it is, its value, why, and the test that exercises it (`vsim::` tests run
//! the whole controller in virtual time; `compute::` and `burst::` are the shim's integration
//! tests on the simulated GPU). **B** = burst only: runs only for a container with a ceiling
//! (`CUDA_DEVICE_SM_CEILING` above the limit); everything else is the limit path. Layout
//! constants (bit fields, word indices) are not knobs and are not listed.
//!
//! | loop / knob | value | why | test |
//! |---|---|---|---|
//! | watcher, samples in flight (`watcher::SAMPLE_POLL`) | every 1 ms | a completed sample re-prices soon | `compute::every_launch_path_is_limited` |
//! | watcher, idle (`watcher::IDLE_POLL`) | 20 ms | control words seen within a period | `compute::monitor_block_and_release_limited_container` |
//! | control tick (`watcher::CONTROL_EVERY_NS`): limit, ceiling, switch, `recent_kernel` | fixed 20 ms grid | a live limit applies within 20 ms; equal burst spans | `burst::sm_limit_and_ceiling_written_to_the_region_are_followed_live` |
//! | NVML round per active device (`watcher::NVML_EVERY_NS`) | 250 ms | several driver periods per answer | `compute::last_kernel_time_and_sm_util_reach_the_region` |
//! | bucket cap (`bucket::BURST_WINDOW_NS`, `MIN_CAP_NS`) | L × 50 ms, ≥ 1 ms | an under-limit workload never waits | `bucket::params`, `vsim::under_limit_is_not_slowed` |
//! | refunds above the cap (`bucket::REFUND_CAPS`) | 2 caps | re-pricing stays symmetric | `bucket::cap_and_debt` |
//! | waiting launch (`bucket::WAKE_QUANTUM_NS`, `MAX_SLEEP_NS`) | 1 ms of balance; ≤ 50 ms per sleep | short kernels in batches; changes seen fast | `bucket::wait_time_matches_rate`, `bucket::cap_and_debt` |
//! | clock jump (`bucket::CLOCK_JUMP_NS`) | 10 s behind | a region that outlived a reboot | `bucket::clock_jump_restarts` |
//! | sampling (`cost::WARMUP`, `SAMPLE_INTERVAL_NS`, `MIN_SAMPLE_GAP_NS`) | every launch until 4, then ≤ 1 per signature per 5 ms, ≤ 1 per process per 250 µs | ~1 event pair per 100 short launches | `cost::sampling_cadence`, `cost::one_sample_start_per_process_per_gap` |
//! | sample deferral (`cost::MAX_IDLE_DEFERS`, `DEFER_BELOW_NS`) | ≤ 3 times, kernels < 1 ms | a sample behind our own work | `cost::idle_stream_samples_are_deferred_after_warmup` |
//! | estimate (`cost::RING`, `MAX_AGE_NS`, `KEEP_MIN`, `CLUSTER_PPM`) | 32 samples ≤ 5 s old (newest 4 kept), within 10 % of the floor | the mean of clean samples | `cost::low_cluster_ignores_inflated_samples`, `cost::old_samples_age_out_but_newest_stay` |
//! | estimate floor (`cost::FLOOR_BUCKETS` × `FLOOR_BUCKET_NS`) | 16 × 1 s | a contended stretch does not lift it | `cost::floor_survives_a_stretch_of_contended_samples` |
//! | sample clamp (`cost::MIN_SAMPLE_NS`, `MAX_SAMPLE_NS`) | 500 ns – 10 s | a broken timer makes no absurd debt | `cost::samples_are_clamped_into_range` |
//! | first guess (`cost::INITIAL_GUESS_NS`) | 100 µs | bounded by the one-unknown-launch rule | `cost::first_launches_are_guessed_then_reconciled` |
//! | first-sample wait (`gate::FIRST_SAMPLE_WAIT_NS`, `FIRST_SAMPLE_POLL_NS`) | ≤ 1 s, polled every 1 ms | bounds unmeasured work per process | `cost::one_unknown_launch_in_flight_per_process`, `vsim::four_processes` |
//! | cost table (`cost::MAX_ENTRIES`, `EVICT_AGE_NS`) | 4096, unused 10 s | bounded memory | `cost::eviction_bounds_the_table` |
//! | container first-sample gate (`cost::FIRST_GATE_HOLD_NS`) | a claim lapses after 500 ms | a dead holder delays others that long at most | `cost::one_unknown_launch_in_flight_per_container` |
//! | container lowest cost (`lowcost::ENTRIES`, `EPOCH_NS`) | 4 shapes, one to two 16 s epochs | a slower kernel or a dead process stops counting | `lowcost::entries_expire_unless_renewed`, `vsim::burst_yields_to_a_newcomer` |
//! | young signature, ramp (`cost::YOUNG_NS`, `RAMP_NS`) | 2 s, then 8 s | queue-confirmed estimates are not trusted at once | `cost::a_lower_container_low_caps_while_young_then_ramps_out` |
//! | paced re-pricing (`cost::REPRICE_LAUNCHES`, `REPRICE_MIN_NS`) | ≤ 2 launches or 20 ms per sample | no lump of debt or refund in the bucket or the correction | `cost::a_re_pricing_reaches_the_bucket_a_couple_of_launches_per_sample` |
//! | NVML correction (`correction::BIN_NS`, `WINDOW_NS`, `HORIZON_NS`) | 10 ms bins, 3 s window, 12 s kept | NVML's resolution | `correction::inflated_charges_are_corrected`, `correction::self_busy_prorates_bins` |
//! | correction update (`correction::UPDATE_EVERY_NS`, `ALPHA`, `SKIP_START_NS`) | halfway every 0.5 s; first 1 s skipped | no wind-up; start-up lag ignored | `correction::returns_to_one_when_consistent_again` |
//! | correction band (`correction::TOL_MARGIN`, `MIN_COVER`, `MIN_BUSY_FRAC`) | NVML rounding + a launch per end + 0.5 %; ≥ half the window covered; ≥ 2 % busy | events are trusted inside NVML's resolution | `correction::consistent_sensor_leaves_k_alone`, `correction::idle_process_does_not_update` |
//! | correction bounds (`correction::R_MIN`/`R_MAX`, `K_MIN`/`K_MAX`) | r ∈ [0.33, 3], k ∈ [0.5, 2] | a sensor that does not describe us is ignored | `correction::under_charging_is_corrected_upwards_and_bounded` |
//! | monitor block (`feedback::BLOCK_POLL_NS`) | polled every 20 ms | release seen within 20 ms | `compute::monitor_block_and_release_limited_container` |
//! | `last_kernel_time` (`RECORD_KERNEL_INTERVAL`) | ≤ once per interval (default 1 s) | no dirty line per launch | `feedback::last_kernel_time_only_increases_and_is_rate_limited` |
//! | timing events (`samples::POOL_MAX`, `PENDING_MAX`) | ≤ 64 free per context, ≤ 256 in flight | bounded driver objects | `compute::every_launch_path_is_limited` |
//! | **B** burst step (`burst::STEP_NS`, `LEAD_AFTER_NS`, `MAX_SPAN_NS`) | 20 ms; leader ≥ 15 ms after the last; a span > 500 ms is no information | one leader per container, no missed tick | `burst::the_burst_step_runs_every_20_ms`, `burst::leadership_and_publish`, `burst::long_spans_count_as_several_steps_and_stale_spans_as_none` |
//! | **B** rate bounds (`burst::MAX_RATE_PPM`) | ≤ 97 % | a burster's queue drains for a newcomer | `burst::limits` |
//! | **B** AIMD (`burst::GROWTH`, `BACKOFF`, `SATURATED_PPM`) | +1.0 × idle × L; × 0.8 per saturated step; saturated ≥ 97 % | fair split by guarantee | `burst::two_bursting_share_in_proportion_to_guarantees`, `burst::backoff_per_steps`, `vsim::two_bursting_share_the_remainder_by_guarantee` |
//! | **B** signals (`burst::BUSY_SMOOTH`, `OTHERS_SMOOTH`, `OTHERS_DECAY`, `OTHERS_ACTIVE_PPM`) | ½ per step; others' share +0.3 / −0.05 per step; active ≥ 3 % | a sparse tenant stays present ~0.75 s | `burst::a_sparse_co_tenant_is_not_a_newcomer` |
//! | **B** newcomer hold (`burst::NEWCOMER_PPM`, `PEAK_DECAY_PER_S`, `PEAK_SLACK`) | ≥ 10 % without per-process NVML; decays 50 %/s; +10 % | yield at once, room back over ~2 s | `burst::yields_within_100ms_when_another_tenant_appears`, `vsim::burst_yields_to_a_newcomer` |

pub mod bucket;
pub mod burst;
pub mod correction;
pub mod cost;
pub mod feedback;
pub mod nvmlspan;
pub mod words;

#[cfg(test)]
mod vsim;

/// Parts per million.
pub const PPM: u64 = 1_000_000;

/// Refill rate for a limit in percent; `None` = unlimited (0 or ≥ 100, docs/hami-contract.md §1.3).
pub fn limit_to_ppm(pct: u64) -> Option<u64> {
    if pct == 0 || pct >= 100 { None } else { Some(pct * 10_000) }
}

/// Is this limit (percent) a real limit?
pub fn is_limited(pct: u64) -> bool {
    limit_to_ppm(pct).is_some()
}
