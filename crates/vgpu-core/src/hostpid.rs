//! Which PID NVML reports for this process (docs/design.md "Host PIDs"): inside a container
//! `getpid()` is a namespace PID, and every per-process figure of NVML (memory for the
//! reconciliation, utilisation for the compute correction) is keyed by the host PID.
//!
//! * [`resolver`]: the diff of NVML's process list around the application's own first context,
//!   tie-breaks and utilisation evidence.
//! * [`correlator`]: memory correlation, for contexts created out of sight.
//!
//! | knob | value | why | test |
//! |---|---|---|---|
//! | evidence (`resolver::EXCLUDE_AFTER`, `BUSY_FRAC`, `FOREIGN_UTIL`) | 2 spans; ≥ 30 % busy; > 5 % foreign | a candidate busy while we idle is not us | `resolver::foreign_busy_while_we_idle_is_excluded`, `resolver::wrong_identity_is_revoked_by_evidence` |
//! | correlation (`correlator::MIN_HITS`, `GRANULE`) | 1 matching move; 2 MiB rounding | our count's moves, matched in the driver's figure | `correlator::the_candidate_that_follows_our_moves_is_us`, `correlator::matching_rules` |

pub mod correlator;
pub mod resolver;
