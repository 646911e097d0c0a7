//! All-zero detection: such records become holes.

/// True if every byte of `data` is zero (true for an empty slice). Word-at-a-time; exits at
/// the first non-zero word, so non-zero data costs almost nothing.
pub fn is_zeros(data: &[u8]) -> bool {
    let (head, words, tail) = {
        // SAFETY: u64 has no invalid bit patterns; align_to only reinterprets aligned middle.
        unsafe { data.align_to::<u64>() }
    };
    head.iter().all(|&b| b == 0)
        && tail.iter().all(|&b| b == 0)
        && words.chunks(8).all(|c| c.iter().fold(0, |acc, &w| acc | w) == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_nonzero_byte_anywhere_is_seen() {
        let mut buf = vec![0u8; 4096 + 13];
        for start in 0..9 {
            let data = &mut buf[start..];
            assert!(is_zeros(data));
            for i in 0..data.len() {
                data[i] = 1;
                assert!(!is_zeros(data), "offset {i} start {start}");
                data[i] = 0;
            }
        }
        assert!(is_zeros(&[]));
    }
}
