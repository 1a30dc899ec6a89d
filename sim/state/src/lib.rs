//! Simulated GPU shared state.
