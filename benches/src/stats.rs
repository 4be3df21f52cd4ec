//! Order statistics over timing samples: the median, percentiles, the best.

use std::time::Duration;

/// Timing samples of one measurement, kept sorted.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    sorted: Vec<Duration>,
}

impl Samples {
    pub fn new(mut samples: Vec<Duration>) -> Samples {
        samples.sort();
        Samples { sorted: samples }
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// The nearest-rank percentile (`p` in 0..=100): the smallest sample with at least p % of
    /// the samples at or below it. Zero when there are no samples.
    pub fn percentile(&self, p: f64) -> Duration {
        if self.sorted.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * self.sorted.len() as f64).ceil() as usize;
        self.sorted[rank.clamp(1, self.sorted.len()) - 1]
    }

    pub fn median(&self) -> Duration {
        self.percentile(50.0)
    }

    pub fn best(&self) -> Duration {
        self.sorted.first().copied().unwrap_or_default()
    }
}

/// Milliseconds with three decimals, as every table prints durations.
pub fn ms(duration: Duration) -> String {
    format!("{:.3}", duration.as_secs_f64() * 1e3)
}

/// `ms` of a statistic, or "-" when nothing was measured (no C compiler, say).
pub fn ms_of(samples: &Samples, statistic: impl Fn(&Samples) -> Duration) -> String {
    if samples.is_empty() {
        "-".into()
    } else {
        ms(statistic(samples))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples = Samples::new((1..=200).rev().map(Duration::from_micros).collect());
        assert_eq!(samples.median(), Duration::from_micros(100));
        assert_eq!(samples.percentile(95.0), Duration::from_micros(190));
        assert_eq!(samples.best(), Duration::from_micros(1));
        assert_eq!(Samples::new(vec![Duration::from_micros(7)]).percentile(95.0), Duration::from_micros(7));
    }
}
