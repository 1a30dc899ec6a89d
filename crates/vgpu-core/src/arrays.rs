//! Bytes charged for CUDA arrays and mipmapped arrays, from their descriptors (the shim reads the
//! descriptor and the element size of its format; the arithmetic is here).
//!
//! A zero height or depth means "this dimension is absent" and counts as 1. An element size the
//! shim cannot name (block-compressed, planar or video formats) is charged as 4 bytes per channel.
//! Every product saturates: a hostile descriptor yields `u64::MAX`, which no limit admits.

/// Bytes per channel charged when the format's element size is unknown.
pub const UNKNOWN_FORMAT_BYTES: u64 = 4;

/// Bytes of one array level: `width × height × depth × channels × element bytes`.
pub fn array_bytes(width: usize, height: usize, depth: usize, channel_bytes: Option<usize>, channels: u32) -> u64 {
    let elem = channel_bytes.map_or(UNKNOWN_FORMAT_BYTES, |b| b as u64);
    (width.max(1) as u64)
        .saturating_mul(height.max(1) as u64)
        .saturating_mul(depth.max(1) as u64)
        .saturating_mul(channels.max(1) as u64)
        .saturating_mul(elem)
}

/// Bytes of a full mip chain of `levels` levels (clamped to 1..=32): each level halves every
/// present dimension, down to 1; the layers of a layered array (`depth` = layer count) do not shrink.
pub fn mipmap_bytes(
    width: usize,
    height: usize,
    depth: usize,
    layered: bool,
    levels: u32,
    channel_bytes: Option<usize>,
    channels: u32,
) -> u64 {
    let mut total = 0u64;
    for l in 0..levels.clamp(1, 32) {
        let w = (width >> l).max(1);
        let h = if height == 0 { 0 } else { (height >> l).max(1) };
        let d = if depth == 0 || layered { depth } else { (depth >> l).max(1) };
        total = total.saturating_add(array_bytes(w, h, d, channel_bytes, channels));
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_levels() {
        assert_eq!(array_bytes(100, 0, 0, Some(1), 1), 100, "1D: absent dimensions count as 1");
        assert_eq!(array_bytes(64, 32, 0, Some(2), 4), 64 * 32 * 2 * 4);
        assert_eq!(array_bytes(8, 8, 8, Some(4), 1), 8 * 8 * 8 * 4);
        assert_eq!(array_bytes(0, 0, 0, Some(1), 0), 1, "zero width and channels count as 1");
    }

    #[test]
    fn unknown_format_is_charged_four_bytes_per_channel() {
        assert_eq!(array_bytes(10, 10, 0, None, 2), 10 * 10 * 2 * UNKNOWN_FORMAT_BYTES);
    }

    #[test]
    fn hostile_sizes_saturate() {
        assert_eq!(array_bytes(usize::MAX, usize::MAX, 2, Some(8), 4), u64::MAX);
        assert_eq!(mipmap_bytes(usize::MAX, usize::MAX, usize::MAX, false, 32, Some(8), 4), u64::MAX);
    }

    #[test]
    fn mip_chain_halves_every_present_dimension() {
        // 2D 256×256, 3 levels: 256² + 128² + 64² texels of 4 bytes.
        assert_eq!(mipmap_bytes(256, 256, 0, false, 3, Some(4), 1), (65536 + 16384 + 4096) * 4);
        // 3D: depth halves too, each dimension stops at 1 (4×2×2, 2×1×1, 1×1×1, 1×1×1).
        assert_eq!(mipmap_bytes(4, 2, 2, false, 4, Some(1), 1), 16 + 2 + 1 + 1);
        // 1D: height stays absent.
        assert_eq!(mipmap_bytes(8, 0, 0, false, 2, Some(1), 1), 8 + 4);
    }

    #[test]
    fn layers_do_not_shrink() {
        // Layered 2D: 16×16 with 6 layers, 2 levels.
        assert_eq!(mipmap_bytes(16, 16, 6, true, 2, Some(1), 1), 16 * 16 * 6 + 8 * 8 * 6);
    }

    #[test]
    fn level_count_is_clamped() {
        assert_eq!(mipmap_bytes(32, 32, 0, false, 0, Some(1), 1), 32 * 32, "0 levels count as 1");
        assert_eq!(mipmap_bytes(1, 1, 0, false, 1000, Some(1), 1), 32, "at most 32 levels, each at least one texel");
    }
}
