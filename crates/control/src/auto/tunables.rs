//! The auto controller's tunables: their defaults and the `name=value` overrides the daemon
//! takes from `SQUEEZEFS_AUTO_TUNE` for tuning on a real device. What each one does and why
//! its default is what it is: the block comment of auto/model.rs (TUNABLES) and, for the `fb_*`
//! ones, of feedback.rs.

/// Time constant of the queue length the correction g follows, seconds (short: the queue is
/// the integral of the rate mismatch already, a long average would make the loop oscillate).
pub const QUEUE_TAU_SECS: f64 = 0.05;

/// Controller tunables (see the module docs for where each is explained).
#[derive(Clone, Debug, PartialEq)]
pub struct Tunables {
    pub queue_target_secs: f64,
    /// time constant of the averaged queue the correction g follows, seconds
    pub queue_tau_secs: f64,
    pub guard_safety_records: u64,
    /// proportional part of ln g per unit of queue error, above / below the target
    pub gain_p_up: f64,
    pub gain_p_down: f64,
    pub gain_i: f64,
    pub gain_min: f64,
    pub gain_max: f64,
    pub min_gain: f64,
    /// input bytes a rung must be measured on before it may drop out of the ladder
    pub confident_bytes: u64,
    pub probe_bytes: u64,
    pub stale_bytes: u64,
    pub explore_timeout_secs: f64,
    /// bytes the pipeline queues for a device by itself (records waiting for their txg):
    /// the queue target is at least this much of device time
    pub batch_bytes: u64,
    /// a rung is explored only if it costs at most this many times the next rung up (or the
    /// probe rung's nominal cost)
    pub explore_reach: f64,
    /// data changes a rung's figures are scaled over before it must be measured again
    pub carry_max: u32,
    /// kinds of data whose figures are remembered
    pub profiles: usize,
    /// 1: the queue-feedback mode (feedback.rs) decides instead of the model
    pub feedback: u32,
    /// feedback mode: rungs per second up (per unit of ln(q/q*)) and down (per unit of
    /// 1 − q/q*), and the proportional part in rungs
    pub fb_up: f64,
    pub fb_down: f64,
    pub fb_p: f64,
    /// feedback mode, before any device has a rate: input bytes queued for every device
    /// above which the position rises all the same (the devices are behind)
    pub fb_start_bytes: u64,
    /// feedback mode: a CPU-bound descent stops at the strongest rung whose write rate
    /// (the CPU's, storing included, or the devices', whichever is lower) is within this
    /// fraction of the fastest rung's (`fb_floor` 0: no floor)
    pub fb_floor_slack: f64,
    pub fb_floor: u32,
    /// feedback mode: seconds ahead a draining queue is extrapolated at its pace before
    /// it is compared with its target (0: the queue as it is)
    pub fb_lead: f64,
    /// feedback mode: seconds the averaged queue must stay above its target before the
    /// devices' drain rate counts as what they can take (the floor's device bound)
    pub fb_capacity_secs: f64,
    /// feedback mode: rungs per second a CPU-bound position rises towards a floor above it
    /// (0: it stays where it is)
    pub fb_lift: f64,
    /// feedback mode: 1 = until the devices have been the bottleneck, their drain rate per
    /// range (`AutoInputs::range_bps`) is the floor's device bound; 0 = none until then
    pub fb_range: u32,
    /// feedback mode: 1 = the floor charges the device writers' measured CPU per stored
    /// byte and the rest of the overhead per input byte; 0 = all of it per stored byte
    pub fb_split: u32,
    /// feedback mode: a CPU-bound descent x − f rungs above the floor goes
    /// max(1, fb_gap·(x − f)) times faster than fb_down (0: at fb_down whatever the distance)
    pub fb_gap: f64,
    /// feedback mode: a backlog counts as the CPU being short only while the compress
    /// workers were busy at least this share of the recent time (0: any backlog counts)
    pub fb_busy: f64,
    /// feedback mode: 1 = a CPU-bound position is held to the strongest rung whose measured
    /// intake rate is within fb_rate_gain of raw's (auto/rate_check.rs); 0 = no check
    pub fb_rate: u32,
    /// feedback mode, rate check: seconds per measuring window, the gain a weaker rung must
    /// show, and the first and longest hold between searches, seconds
    pub fb_rate_secs: f64,
    pub fb_rate_gain: f64,
    pub fb_rate_hold: f64,
    pub fb_rate_hold_max: f64,
    /// feedback mode, rate check: the idle share of the allowed CPUs (every process
    /// counted) at or below which the CPU bounds the write though the workers wait
    pub fb_rate_idle: f64,
    /// 1 = a controller may start at the rung the pool's last write ended on
    /// (`AutoController::resume_at`); 0 = always at the nominal starting rung
    pub fb_resume: u32,
}

impl Default for Tunables {
    fn default() -> Tunables {
        Tunables {
            queue_target_secs: 0.05,
            queue_tau_secs: QUEUE_TAU_SECS,
            guard_safety_records: 2,
            gain_p_up: 1.0,
            gain_p_down: 0.3,
            gain_i: 0.5,
            gain_min: 0.25,
            gain_max: 8.0,
            min_gain: 0.03,
            confident_bytes: 256 << 10,
            probe_bytes: 64 << 20,
            stale_bytes: 1 << 30,
            explore_timeout_secs: 1.0,
            batch_bytes: 0,
            explore_reach: 2.0,
            carry_max: 2,
            profiles: 8,
            feedback: 1,
            fb_up: 4.0,
            fb_down: 6.0,
            fb_p: 1.0,
            fb_start_bytes: 32 << 20,
            fb_floor_slack: 0.15,
            fb_floor: 1,
            fb_lead: 1.0,
            fb_capacity_secs: 0.5,
            fb_lift: 4.0,
            fb_range: 1,
            fb_split: 1,
            fb_gap: 0.5,
            fb_busy: 0.9,
            fb_rate: 1,
            fb_rate_secs: 0.1,
            fb_rate_gain: 0.03,
            fb_rate_hold: 1.0,
            fb_rate_hold_max: 8.0,
            fb_rate_idle: 0.1,
            fb_resume: 1,
        }
    }
}

impl Tunables {
    /// The defaults with the model deciding instead of the queue feedback: the mode whose
    /// ladder is built from each rung's own measurements, which QoS's `mix_for_rate` reads.
    pub fn model() -> Tunables {
        Tunables { feedback: 0, ..Tunables::default() }
    }

    /// The names [`Tunables::set`] accepts.
    pub const NAMES: &'static [&'static str] = &[
        "queue_target_secs",
        "queue_tau_secs",
        "guard_safety_records",
        "gain_p_up",
        "gain_p_down",
        "gain_i",
        "gain_min",
        "gain_max",
        "min_gain",
        "confident_bytes",
        "probe_bytes",
        "stale_bytes",
        "explore_timeout_secs",
        "explore_reach",
        "carry_max",
        "profiles",
        "feedback",
        "fb_up",
        "fb_down",
        "fb_p",
        "fb_start_bytes",
        "fb_floor_slack",
        "fb_floor",
        "fb_lead",
        "fb_capacity_secs",
        "fb_lift",
        "fb_range",
        "fb_split",
        "fb_gap",
        "fb_busy",
        "fb_rate",
        "fb_rate_secs",
        "fb_rate_gain",
        "fb_rate_hold",
        "fb_rate_hold_max",
        "fb_rate_idle",
        "fb_resume",
        "batch_bytes",
    ];

    /// Overrides from `name=value,name=value` (the daemon's `SQUEEZEFS_AUTO_TUNE`, for tuning
    /// on a real device what the simulation cannot model). Values must be finite and not
    /// negative; an error names the item and what is accepted, and leaves `self` unchanged.
    pub fn set(&mut self, items: &str) -> Result<(), String> {
        let mut t = self.clone();
        for item in items.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let Some((name, value)) = item.split_once('=') else {
                return Err(format!("`{item}`: expected name=value"));
            };
            let (name, value) = (name.trim(), value.trim());
            let v: f64 = value
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("`{item}`: the value must be a number ≥ 0"))?;
            let whole = || -> Result<u64, String> {
                // integers above 2^53 are not exact in the f64 they were parsed into
                (v.fract() == 0.0 && v <= (1u64 << 53) as f64)
                    .then_some(v as u64)
                    .ok_or_else(|| format!("`{item}`: {name} takes a whole number"))
            };
            let small =
                || -> Result<u32, String> { u32::try_from(whole()?).map_err(|_| format!("`{item}`: too large")) };
            match name {
                "queue_target_secs" => t.queue_target_secs = v,
                "queue_tau_secs" => t.queue_tau_secs = v,
                "guard_safety_records" => t.guard_safety_records = whole()?,
                "gain_p_up" => t.gain_p_up = v,
                "gain_p_down" => t.gain_p_down = v,
                "gain_i" => t.gain_i = v,
                "gain_min" => t.gain_min = v,
                "gain_max" => t.gain_max = v,
                "min_gain" => t.min_gain = v,
                "confident_bytes" => t.confident_bytes = whole()?,
                "probe_bytes" => t.probe_bytes = whole()?,
                "stale_bytes" => t.stale_bytes = whole()?,
                "explore_timeout_secs" => t.explore_timeout_secs = v,
                "explore_reach" => t.explore_reach = v,
                "carry_max" => t.carry_max = small()?,
                "profiles" => t.profiles = whole()? as usize,
                "feedback" => t.feedback = small()?,
                "fb_up" => t.fb_up = v,
                "fb_down" => t.fb_down = v,
                "fb_p" => t.fb_p = v,
                "fb_start_bytes" => t.fb_start_bytes = whole()?,
                "fb_floor_slack" => t.fb_floor_slack = v,
                "fb_lead" => t.fb_lead = v,
                "fb_capacity_secs" => t.fb_capacity_secs = v,
                "fb_lift" => t.fb_lift = v,
                "fb_range" => t.fb_range = small()?,
                "fb_split" => t.fb_split = small()?,
                "fb_gap" => t.fb_gap = v,
                "fb_busy" => t.fb_busy = v,
                "fb_rate" => t.fb_rate = small()?,
                "fb_rate_secs" => t.fb_rate_secs = v,
                "fb_rate_gain" => t.fb_rate_gain = v,
                "fb_rate_hold" => t.fb_rate_hold = v,
                "fb_rate_hold_max" => t.fb_rate_hold_max = v,
                "fb_rate_idle" => t.fb_rate_idle = v,
                "fb_resume" => t.fb_resume = small()?,
                "batch_bytes" => t.batch_bytes = whole()?,
                "fb_floor" => t.fb_floor = small()?,
                _ => return Err(format!("`{name}`: unknown tunable (accepted: {})", Tunables::NAMES.join(", "))),
            }
        }
        if !(t.fb_rate_secs > 0.0 && t.fb_rate_hold > 0.0 && t.fb_rate_hold_max >= t.fb_rate_hold) {
            return Err(
                "fb_rate_secs and fb_rate_hold must be above 0 and fb_rate_hold_max at least fb_rate_hold".into()
            );
        }
        if !(t.gain_min > 0.0 && t.gain_min <= 1.0 && t.gain_max >= 1.0) {
            return Err("gain_min must lie in (0, 1] and gain_max be at least 1".into());
        }
        *self = t;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Tunables;

    #[test]
    fn a_whole_number_tunable_refuses_fractions_and_values_past_its_type() {
        let mut t = Tunables::default();
        t.set("feedback=0, fb_range=0").expect("whole numbers in range");
        assert_eq!((t.feedback, t.fb_range), (0, 0));
        let err = t.set("carry_max=4294967296").unwrap_err();
        assert!(err.contains("too large"), "{err}");
        let err = t.set("fb_split=0.5").unwrap_err();
        assert!(err.contains("takes a whole number"), "{err}");
        // a refused item leaves every value as it was
        assert_eq!(t.carry_max, Tunables::default().carry_max);
    }
}
