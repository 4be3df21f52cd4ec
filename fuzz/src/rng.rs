//! A small seeded generator (SplitMix64): every case is a pure function of its seed, so a
//! seed and a case number reproduce it anywhere.

/// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators").
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator for case `case` of the run seeded `seed`.
    pub fn for_case(seed: u64, case: u64) -> Rng {
        let mut rng = Rng { state: seed ^ 0x5851_f42d_4c95_7f2d };
        let mixed = rng.next_u64() ^ case.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        Rng { state: mixed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (`bound` > 0); the slight modulo bias does not matter here.
    pub fn below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound.max(1) as u64) as usize
    }

    /// True with probability `numerator / denominator`.
    pub fn chance(&mut self, numerator: usize, denominator: usize) -> bool {
        self.below(denominator) < numerator
    }

    /// One element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A number in `low..=high`.
    pub fn range(&mut self, low: i64, high: i64) -> i64 {
        let span = (i128::from(high) - i128::from(low) + 1) as u128;
        let offset = u128::from(self.next_u64()) % span;
        (i128::from(low) + offset as i128) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn one_seed_and_case_give_one_sequence() {
        let first: Vec<u64> = (0..4).map(|_| Rng::for_case(7, 3).next_u64()).collect();
        assert!(first.windows(2).all(|pair| pair[0] == pair[1]));
        assert_ne!(Rng::for_case(7, 3).next_u64(), Rng::for_case(7, 4).next_u64());
    }
}
