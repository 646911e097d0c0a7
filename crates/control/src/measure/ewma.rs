//! Moving averages for measured inputs: over time (a time constant, for signals sampled at
//! irregular moments such as a queue length) and over bytes (a window of data, for per-record
//! figures such as compression cost or ratio, whose samples arrive only while the level is in
//! use). Both start at the first sample (thesis eq. 5.2 lets the first value set the average)
//! and ignore samples that are not finite.

/// Exponentially weighted moving average over time: a sample taken `dt` seconds after the
/// previous one has weight `1 - exp(-dt / tau)`, so the average forgets with time constant
/// `tau` however irregular the sampling.
#[derive(Clone, Debug, PartialEq)]
pub struct TimeEwma {
    tau_secs: f64,
    value: Option<f64>,
    last_secs: f64,
}

impl TimeEwma {
    /// `tau_secs` must be positive.
    pub fn new(tau_secs: f64) -> TimeEwma {
        debug_assert!(tau_secs > 0.0);
        TimeEwma { tau_secs, value: None, last_secs: 0.0 }
    }

    /// Add a sample taken at `now_secs`; returns the new average. Samples from the past (a
    /// clock read before the previous one by another thread) count with weight 0.
    pub fn update(&mut self, now_secs: f64, sample: f64) -> f64 {
        if !sample.is_finite() || !now_secs.is_finite() {
            return self.value.unwrap_or(0.0);
        }
        let v = match self.value {
            None => sample,
            Some(old) => {
                let dt = (now_secs - self.last_secs).max(0.0);
                let w = 1.0 - (-dt / self.tau_secs).exp();
                old + w * (sample - old)
            }
        };
        self.last_secs = self.last_secs.max(now_secs);
        self.value = Some(v);
        v
    }

    pub fn value(&self) -> Option<f64> {
        self.value
    }

    pub fn reset(&mut self) {
        self.value = None;
    }
}

/// Exponentially weighted moving average over bytes: a sample covering `bytes` has weight
/// `bytes / (bytes + window)`, so the average spans roughly the last `window` bytes whatever
/// the sample size (the same rule as the device throughput average in `squeezefs-device`).
#[derive(Clone, Debug, PartialEq)]
pub struct ByteEwma {
    window_bytes: f64,
    value: Option<f64>,
}

impl ByteEwma {
    pub fn new(window_bytes: u64) -> ByteEwma {
        ByteEwma { window_bytes: window_bytes.max(1) as f64, value: None }
    }

    /// Add a sample covering `bytes` bytes (0 bytes: ignored); returns the new average.
    pub fn update(&mut self, sample: f64, bytes: u64) -> Option<f64> {
        if bytes == 0 || !sample.is_finite() {
            return self.value;
        }
        let b = bytes as f64;
        let v = match self.value {
            None => sample,
            Some(old) => old + b / (b + self.window_bytes) * (sample - old),
        };
        self.value = Some(v);
        self.value
    }

    pub fn value(&self) -> Option<f64> {
        self.value
    }

    /// Replace the average by `value` (a level whose data changed starts from its recent
    /// figure instead of converging from the old one).
    pub fn set(&mut self, value: f64) {
        if value.is_finite() {
            self.value = Some(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_average_forgets_with_its_time_constant() {
        let mut e = TimeEwma::new(1.0);
        assert_eq!(e.value(), None);
        assert_eq!(e.update(10.0, 100.0), 100.0, "first sample sets the average");
        // one time constant later a step to 0 has moved the average by 1 - 1/e
        let v = e.update(11.0, 0.0);
        assert!((v - 100.0 / std::f64::consts::E).abs() < 1e-9, "{v}");
        // a sample at the same moment has no weight; one from the past neither
        assert_eq!(e.update(11.0, 1e9), v);
        assert_eq!(e.update(5.0, 1e9), v);
        assert_eq!(e.update(12.0, f64::NAN), v);
        // many small steps equal one large one (irregular sampling does not matter)
        let (mut a, mut b) = (TimeEwma::new(0.5), TimeEwma::new(0.5));
        a.update(0.0, 0.0);
        b.update(0.0, 0.0);
        for i in 1..=100 {
            a.update(i as f64 * 0.01, 1.0);
        }
        b.update(1.0, 1.0);
        assert!((a.value().unwrap() - b.value().unwrap()).abs() < 1e-9);
    }

    #[test]
    fn byte_average_spans_its_window_whatever_the_sample_size() {
        let mut e = ByteEwma::new(1 << 20);
        assert_eq!(e.update(7.0, 0), None, "empty samples are ignored");
        assert_eq!(e.update(2.0, 4096), Some(2.0));
        // a sample as large as the window moves the average half way
        assert_eq!(e.update(4.0, 1 << 20), Some(3.0));
        // 16 MiB of a new value in 128 KiB samples: the old value is forgotten
        for _ in 0..128 {
            e.update(10.0, 128 << 10);
        }
        assert!((e.value().unwrap() - 10.0).abs() < 0.01, "{:?}", e.value());
        e.set(1.5);
        assert_eq!(e.value(), Some(1.5));
    }
}
