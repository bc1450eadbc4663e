//! Answering discovery pings without amplifying them: anyone may publish a ping, and every
//! agent and workflow answers with its card, so each ping would cost the mesh one card per
//! agent (50 000 empty pings: gigabytes of cards). A [`PingGate`] lets a card out in
//! answer to pings at most once per [`PING_ANSWER_GAP`], however many arrive: the first
//! ping after a quiet gap is answered at once, later ones within the gap are owed one
//! publish at its end. (Publishes at start and on the card interval are apart.)
//!
//! Pure: the caller passes the time and sleeps until [`PingGate::due`].

use std::time::{Duration, Instant};

/// The shortest time between two publishes of a card that answer pings.
pub const PING_ANSWER_GAP: Duration = Duration::from_secs(1);

/// When to publish a card in answer to pings (see the module doc).
#[derive(Debug, Clone)]
pub struct PingGate {
    gap: Duration,
    last: Option<Instant>,
    owed: bool,
}

impl PingGate {
    /// A gate letting a card out at most once per `gap`.
    pub fn new(gap: Duration) -> PingGate {
        PingGate {
            gap,
            last: None,
            owed: false,
        }
    }

    /// A ping arrived at `now`: whether to publish the card now. When not, one publish is
    /// owed, at [`PingGate::due`].
    pub fn ping(&mut self, now: Instant) -> bool {
        match self.last {
            Some(last) if now < last + self.gap => {
                self.owed = true;
                false
            }
            _ => true,
        }
    }

    /// The card was published in answer to pings at `now`: what was owed is paid.
    pub fn published(&mut self, now: Instant) {
        self.last = Some(now);
        self.owed = false;
    }

    /// When the owed publish is due, if one is owed.
    pub fn due(&self) -> Option<Instant> {
        match (self.owed, self.last) {
            (true, Some(last)) => Some(last + self.gap),
            _ => None,
        }
    }
}

impl Default for PingGate {
    /// A gate of [`PING_ANSWER_GAP`].
    fn default() -> PingGate {
        PingGate::new(PING_ANSWER_GAP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pings_within_a_gap_owe_one_publish_at_its_end() {
        let t0 = Instant::now();
        let gap = Duration::from_secs(1);
        let mut gate = PingGate::new(gap);
        assert!(gate.ping(t0), "the first ping is answered at once");
        gate.published(t0);
        assert_eq!(gate.due(), None);
        for i in 1..10_000u64 {
            assert!(!gate.ping(t0 + Duration::from_micros(i * 50)));
        }
        assert_eq!(
            gate.due(),
            Some(t0 + gap),
            "one publish owed, at the gap's end"
        );
        gate.published(t0 + gap);
        assert_eq!(gate.due(), None);
        assert!(gate.ping(t0 + gap * 3), "after a quiet gap, at once again");
    }

    #[test]
    fn the_first_ping_is_answered_at_once() {
        let mut gate = PingGate::default();
        assert!(gate.ping(Instant::now()));
        assert_eq!(gate.due(), None);
    }
}
