//! Checks one client's streams as they arrive: per topic, every message once, in order, and
//! no gap of acknowledged messages unless a loss signal covers it. Each finding names the
//! client, topic, ids and the fault in force when it happened.
//!
//! Messages carry the publisher's per-topic sequence number (`seq`, from 1). When the client's
//! first session opens (it is subscribed), each topic gets a floor: the publish in flight then
//! may or may not reach it, but every acknowledged one after it must, so a first message past
//! the floor with acknowledged numbers between is a gap like any other. The first message
//! sets the baseline; from then on, across reconnects, nodes and transports (the client
//! resumes with its cursors), the next message must be the next sequence number the publisher
//! got acknowledged. Publishes whose fate is unknown (every try timed out or failed) may arrive
//! late or never: neither counts against the server. A publish acknowledged after a retry
//! (sent again with its idempotency key) is acknowledged like any other: it must arrive
//! exactly once, so a second copy is a duplicate; findings say how many of their messages
//! were retried publishes.

use std::collections::BTreeSet;

use serde::Serialize;

use super::ledger::{Fate, Fates};
use super::schedule::Transport;
use super::timeline::{FaultRef, Timeline};

/// Skipped sequence numbers remembered per topic (to tell a late arrival from a duplicate).
const SKIPPED_CAP: usize = 4096;
/// Gap sizes scanned against the ledger, at most.
const SCAN_CAP: u64 = 1_000_000;

/// What a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FindingKind {
    /// Acknowledged messages never delivered, without a loss signal.
    SilentGap,
    /// Acknowledged messages never delivered, after a loss signal that says so.
    SignalledGap,
    /// A message delivered twice.
    Duplicate,
    /// An acknowledged message delivered after a later one.
    Reorder,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Finding {
    pub(crate) kind: FindingKind,
    pub(crate) client: u64,
    pub(crate) topic: String,
    pub(crate) transport: Transport,
    /// Node index (0-based) of the session that saw it.
    pub(crate) node: usize,
    /// The last sequence number before it, and the one that revealed it.
    pub(crate) prev_seq: u64,
    pub(crate) seq: u64,
    pub(crate) prev_id: String,
    pub(crate) id: String,
    /// Gaps: acknowledged messages missing, and the first of them.
    pub(crate) missing: u64,
    pub(crate) first_missing: u64,
    /// Signalled gaps: the loss signal's reason (`expired`, `epoch`, `lagged`).
    pub(crate) reason: Option<String>,
    /// How many of its messages were publishes sent more than once (with their idempotency
    /// key): of a gap, the missing ones; of a duplicate or reorder, 1 or 0.
    pub(crate) retried: u64,
    /// When it was seen (ms since the run began).
    pub(crate) at_ms: u64,
    /// The fault in force between the last good message and this one.
    pub(crate) fault: Option<FaultRef>,
}

/// Where a client is when something arrives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Here {
    pub(crate) client: u64,
    pub(crate) transport: Transport,
    pub(crate) node: usize,
    pub(crate) now_ms: u64,
}

#[derive(Debug, Default)]
struct TopicState {
    /// Set when the client's first session opened: every acknowledged number above it must be
    /// delivered (the one in flight then, `floor` itself, may not be).
    floor: Option<u64>,
    /// Checked from here: every acknowledged number above it, up to `last_seq`, was
    /// delivered once or is in a finding (set by the first message).
    checked_after: Option<u64>,
    last_seq: u64,
    last_id: String,
    last_at_ms: u64,
    skipped: BTreeSet<u64>,
    loss: Option<String>,
}

/// The checker of one client: its topics (ledger index, name) and what it saw.
#[derive(Debug)]
pub(crate) struct StreamCheck {
    topics: Vec<(usize, String)>,
    state: Vec<TopicState>,
    findings: Vec<Finding>,
    /// Messages received (duplicates included).
    pub(crate) delivered: u64,
    /// Publishes of unknown fate that arrived after later ones (allowed).
    pub(crate) late_uncertain: u64,
    /// Loss signals received.
    pub(crate) signals: u64,
}

impl StreamCheck {
    pub(crate) fn new(topics: Vec<(usize, String)>) -> Self {
        let state = topics.iter().map(|_| TopicState::default()).collect();
        StreamCheck {
            topics,
            state,
            findings: Vec::new(),
            delivered: 0,
            late_uncertain: 0,
            signals: 0,
        }
    }

    pub(crate) fn topics(&self) -> &[(usize, String)] {
        &self.topics
    }

    /// The slot of a topic name.
    pub(crate) fn slot(&self, topic: &str) -> Option<usize> {
        self.topics.iter().position(|(_, n)| n == topic)
    }

    /// The last sequence number received on a slot (0: none yet).
    pub(crate) fn last_seq(&self, slot: usize) -> u64 {
        self.state[slot].last_seq
    }

    /// The sequence numbers of a slot the check covered, `(after, last]`: every acknowledged
    /// publish among them was delivered exactly once unless a finding says otherwise. `None`
    /// before the first message.
    pub(crate) fn checked(&self, slot: usize) -> Option<(u64, u64)> {
        let st = &self.state[slot];
        st.checked_after.map(|after| (after, st.last_seq))
    }

    /// A session opened (the client is subscribed to its topics): the first one sets each
    /// topic's floor, one past the last publish answered by now.
    pub(crate) fn on_open(&mut self, fates: &impl Fates) {
        for (st, (ledger_topic, _)) in self.state.iter_mut().zip(&self.topics) {
            if st.floor.is_none() && st.last_seq == 0 {
                st.floor = Some(fates.answered(*ledger_topic) + 1);
            }
        }
    }

    /// A loss signal for a slot: it covers the next gap.
    pub(crate) fn on_loss(&mut self, slot: usize, reason: &str) {
        self.signals += 1;
        self.state[slot].loss = Some(reason.to_owned());
    }

    /// A message on a slot.
    pub(crate) fn on_message(
        &mut self,
        slot: usize,
        seq: u64,
        id: &str,
        here: Here,
        fates: &impl Fates,
        timeline: &Timeline,
    ) {
        self.delivered += 1;
        let ledger_topic = self.topics[slot].0;
        let st = &mut self.state[slot];
        if st.last_seq == 0 {
            match st.floor {
                // Checked from the floor: the acknowledged numbers between it and this one
                // were published while the client was subscribed.
                Some(floor) if seq > floor => {
                    st.last_seq = floor;
                    st.last_id = "(subscribed)".to_owned();
                    st.checked_after = Some(floor);
                }
                _ => {
                    st.checked_after = Some(seq.saturating_sub(1));
                    st.last_seq = seq;
                    st.last_id = id.to_owned();
                    st.last_at_ms = here.now_ms;
                    st.loss = None;
                    return;
                }
            }
        }
        if seq > st.last_seq {
            let mut missing = 0;
            let mut first_missing = 0;
            let mut retried = 0;
            for k in (st.last_seq + 1)..seq.min(st.last_seq.saturating_add(SCAN_CAP)) {
                if fates.fate(ledger_topic, k) == Fate::Acked {
                    missing += 1;
                    retried += u64::from(fates.retried(ledger_topic, k));
                    if first_missing == 0 {
                        first_missing = k;
                    }
                }
                if st.skipped.len() >= SKIPPED_CAP {
                    st.skipped.pop_first();
                }
                st.skipped.insert(k);
            }
            if missing > 0 {
                let reason = st.loss.take();
                let kind = if reason.is_some() {
                    FindingKind::SignalledGap
                } else {
                    FindingKind::SilentGap
                };
                let fault = timeline.blame(st.last_at_ms, here.now_ms);
                let f = finding(kind, &self.topics[slot].1, here, st, seq, id, fault);
                self.findings.push(Finding {
                    missing,
                    first_missing,
                    reason,
                    retried,
                    ..f
                });
            }
            st.loss = None;
            st.last_seq = seq;
            st.last_id = id.to_owned();
            st.last_at_ms = here.now_ms;
        } else if st.skipped.remove(&seq) {
            if fates.fate(ledger_topic, seq) == Fate::Acked {
                let fault = timeline.blame(st.last_at_ms, here.now_ms);
                let f = finding(
                    FindingKind::Reorder,
                    &self.topics[slot].1,
                    here,
                    st,
                    seq,
                    id,
                    fault,
                );
                let was_retried = fates.retried(ledger_topic, seq);
                self.findings.push(Finding {
                    retried: u64::from(was_retried),
                    ..f
                });
                // the gap that counted it missing: it was late, not lost
                let topic = &self.topics[slot].1;
                if let Some(g) = self.findings.iter_mut().rev().find(|g| {
                    matches!(g.kind, FindingKind::SilentGap | FindingKind::SignalledGap)
                        && &g.topic == topic
                        && g.prev_seq < seq
                        && seq < g.seq
                        && g.missing > 0
                }) {
                    g.missing -= 1;
                    if was_retried {
                        g.retried = g.retried.saturating_sub(1);
                    }
                }
            } else {
                self.late_uncertain += 1;
            }
        } else {
            let fault = timeline.blame(here.now_ms, here.now_ms);
            let f = finding(
                FindingKind::Duplicate,
                &self.topics[slot].1,
                here,
                st,
                seq,
                id,
                fault,
            );
            self.findings.push(Finding {
                retried: u64::from(fates.retried(ledger_topic, seq)),
                ..f
            });
        }
    }

    /// The findings, without gaps that late arrivals filled entirely.
    pub(crate) fn into_findings(self) -> Vec<Finding> {
        self.findings
            .into_iter()
            .filter(|f| {
                !matches!(f.kind, FindingKind::SilentGap | FindingKind::SignalledGap)
                    || f.missing > 0
            })
            .collect()
    }
}

fn finding(
    kind: FindingKind,
    topic: &str,
    here: Here,
    st: &TopicState,
    seq: u64,
    id: &str,
    fault: Option<FaultRef>,
) -> Finding {
    Finding {
        kind,
        client: here.client,
        topic: topic.to_owned(),
        transport: here.transport,
        node: here.node,
        prev_seq: st.last_seq,
        seq,
        prev_id: st.last_id.clone(),
        id: id.to_owned(),
        missing: 0,
        first_missing: 0,
        reason: None,
        retried: 0,
        at_ms: here.now_ms,
        fault,
    }
}

#[cfg(test)]
mod tests {
    use super::super::fault::FaultKind;
    use super::*;

    /// Every sequence number acked except those listed as uncertain.
    struct Stub(Vec<u64>);
    impl Fates for Stub {
        fn fate(&self, _topic: usize, seq: u64) -> Fate {
            if self.0.contains(&seq) {
                Fate::Uncertain
            } else {
                Fate::Acked
            }
        }
        fn answered(&self, _topic: usize) -> u64 {
            3
        }
    }

    fn here(now_ms: u64) -> Here {
        Here {
            client: 7,
            transport: Transport::Ws,
            node: 1,
            now_ms,
        }
    }

    fn feed(c: &mut StreamCheck, seqs: &[u64], fates: &Stub, tl: &Timeline) {
        for (i, s) in seqs.iter().enumerate() {
            c.on_message(
                0,
                *s,
                &format!("e-{s}"),
                here(1_000 + i as u64 * 100),
                fates,
                tl,
            );
        }
    }

    fn kinds(c: StreamCheck) -> Vec<(FindingKind, u64, u64)> {
        c.into_findings()
            .into_iter()
            .map(|f| (f.kind, f.seq, f.missing))
            .collect()
    }

    #[test]
    fn an_in_order_stream_is_clean_from_any_baseline() {
        let tl = Timeline::default();
        let mut c = StreamCheck::new(vec![(0, "t".into())]);
        feed(&mut c, &[5, 6, 7, 8], &Stub(vec![]), &tl);
        assert_eq!(c.delivered, 4);
        assert!(kinds(c).is_empty());
    }

    #[test]
    fn acknowledged_messages_missing_before_the_first_one_are_a_gap_from_the_opening() {
        let tl = Timeline::default();
        // Subscribed when 3 was the last publish answered: 4 may be missed (in flight then),
        // 5 and 6 may not.
        let mut c = StreamCheck::new(vec![(0, "t".into())]);
        c.on_open(&Stub(vec![]));
        feed(&mut c, &[7, 8], &Stub(vec![]), &tl);
        assert_eq!(kinds(c), [(FindingKind::SilentGap, 7, 2)]);
        // The in-flight one missed, or an earlier one delivered: clean.
        for first in [5, 2] {
            let mut c = StreamCheck::new(vec![(0, "t".into())]);
            c.on_open(&Stub(vec![]));
            feed(&mut c, &[first, first + 1], &Stub(vec![]), &tl);
            assert!(kinds(c).is_empty(), "first {first}");
        }
        // A later session does not move the floor.
        let mut c = StreamCheck::new(vec![(0, "t".into())]);
        c.on_open(&Stub(vec![]));
        c.on_open(&Stub2);
        feed(&mut c, &[6], &Stub(vec![]), &tl);
        assert_eq!(kinds(c), [(FindingKind::SilentGap, 6, 1)]);
    }

    /// Answered up to 100.
    struct Stub2;
    impl Fates for Stub2 {
        fn fate(&self, _topic: usize, _seq: u64) -> Fate {
            Fate::Acked
        }
        fn answered(&self, _topic: usize) -> u64 {
            100
        }
    }

    #[test]
    fn a_silent_gap_is_reported_with_its_fault() {
        let tl = Timeline::default();
        let f = tl.begin(FaultKind::NodeKill, "node2", 0, 1_050);
        tl.end(f, 1_150, None);
        let mut c = StreamCheck::new(vec![(0, "t".into())]);
        feed(&mut c, &[1, 2, 5], &Stub(vec![]), &tl);
        let found = c.into_findings();
        assert_eq!(found.len(), 1);
        let g = &found[0];
        assert_eq!(
            (g.kind, g.prev_seq, g.seq, g.missing, g.first_missing),
            (FindingKind::SilentGap, 2, 5, 2, 3)
        );
        assert_eq!((g.prev_id.as_str(), g.id.as_str()), ("e-2", "e-5"));
        assert_eq!(g.fault.as_ref().unwrap().kind, FaultKind::NodeKill);
        assert_eq!(g.client, 7);
    }

    #[test]
    fn unacknowledged_publishes_may_be_missing_or_late() {
        let tl = Timeline::default();
        let mut c = StreamCheck::new(vec![(0, "t".into())]);
        // 3 timed out: skipping it is no gap, and it arriving late is no reorder
        feed(&mut c, &[1, 2, 4, 3, 5], &Stub(vec![3]), &tl);
        assert_eq!(c.late_uncertain, 1);
        assert!(kinds(c).is_empty());
    }

    #[test]
    fn a_loss_signal_covers_the_next_gap_only() {
        let tl = Timeline::default();
        let mut c = StreamCheck::new(vec![(0, "t".into())]);
        feed(&mut c, &[1, 2], &Stub(vec![]), &tl);
        c.on_loss(0, "expired");
        feed(&mut c, &[6, 7, 9], &Stub(vec![]), &tl);
        let found = c.into_findings();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].kind, FindingKind::SignalledGap);
        assert_eq!(found[0].reason.as_deref(), Some("expired"));
        assert_eq!(found[0].missing, 3);
        assert_eq!(found[1].kind, FindingKind::SilentGap);
        assert_eq!(found[1].missing, 1);
    }

    #[test]
    fn a_signal_without_a_gap_is_spent_by_the_next_message() {
        let tl = Timeline::default();
        let mut c = StreamCheck::new(vec![(0, "t".into())]);
        feed(&mut c, &[1], &Stub(vec![]), &tl);
        c.on_loss(0, "epoch");
        feed(&mut c, &[2, 4], &Stub(vec![]), &tl);
        assert_eq!(kinds(c), vec![(FindingKind::SilentGap, 4, 1)]);
    }

    #[test]
    fn duplicates_are_found_in_and_behind_the_window() {
        let tl = Timeline::default();
        let mut c = StreamCheck::new(vec![(0, "t".into())]);
        feed(&mut c, &[1, 2, 3, 3, 1], &Stub(vec![]), &tl);
        assert_eq!(
            kinds(c),
            vec![
                (FindingKind::Duplicate, 3, 0),
                (FindingKind::Duplicate, 1, 0)
            ]
        );
    }

    #[test]
    fn a_late_acknowledged_message_is_a_reorder_not_a_gap() {
        let tl = Timeline::default();
        let mut c = StreamCheck::new(vec![(0, "t".into())]);
        feed(&mut c, &[1, 3, 2, 4], &Stub(vec![]), &tl);
        assert_eq!(kinds(c), vec![(FindingKind::Reorder, 2, 0)]);
        // a late message arriving twice: the second is a duplicate
        let mut c = StreamCheck::new(vec![(0, "t".into())]);
        feed(&mut c, &[1, 4, 2, 2], &Stub(vec![]), &tl);
        assert_eq!(
            kinds(c),
            vec![
                (FindingKind::SilentGap, 4, 1),
                (FindingKind::Reorder, 2, 0),
                (FindingKind::Duplicate, 2, 0)
            ]
        );
    }

    /// Every publish acknowledged; those listed were sent more than once.
    struct Retried(Vec<u64>);
    impl Fates for Retried {
        fn fate(&self, _topic: usize, _seq: u64) -> Fate {
            Fate::Acked
        }
        fn answered(&self, _topic: usize) -> u64 {
            2
        }
        fn retried(&self, _topic: usize, seq: u64) -> bool {
            self.0.contains(&seq)
        }
    }

    #[test]
    fn a_publish_acknowledged_after_a_retry_is_expected_exactly_once() {
        let tl = Timeline::default();
        let fates = Retried(vec![3, 5, 6]);
        let mut c = StreamCheck::new(vec![(0, "t".into())]);
        c.on_open(&fates);
        assert_eq!(c.checked(0), None);
        // 3 arrives twice (both tries written would be a duplicate), 5 and 6 are missing, 4
        // (sent once) too
        for (i, s) in [3, 3, 7].iter().enumerate() {
            c.on_message(0, *s, "x", here(i as u64), &fates, &tl);
        }
        // checked from its first message, 3 (the publish in flight at the opening), to 7
        assert_eq!(c.checked(0), Some((2, 7)));
        let f: Vec<_> = c
            .into_findings()
            .into_iter()
            .map(|f| (f.kind, f.seq, f.missing, f.retried))
            .collect();
        assert_eq!(
            f,
            [
                (FindingKind::Duplicate, 3, 0, 1),
                (FindingKind::SilentGap, 7, 3, 2)
            ]
        );
        // a retried one arriving late fills the gap's count and is a reorder of its own
        let mut c = StreamCheck::new(vec![(0, "t".into())]);
        for (i, s) in [1, 2, 4, 3].iter().enumerate() {
            c.on_message(0, *s, "x", here(i as u64), &Retried(vec![3]), &tl);
        }
        assert_eq!(c.checked(0), Some((0, 4)));
        let f: Vec<_> = c
            .into_findings()
            .into_iter()
            .map(|f| (f.kind, f.seq, f.missing, f.retried))
            .collect();
        assert_eq!(f, [(FindingKind::Reorder, 3, 0, 1)]);
    }

    #[test]
    fn topics_are_checked_apart() {
        let tl = Timeline::default();
        let mut c = StreamCheck::new(vec![(0, "a".into()), (1, "b".into())]);
        let s = Stub(vec![]);
        c.on_message(0, 1, "x", here(1), &s, &tl);
        c.on_message(1, 1, "y", here(2), &s, &tl);
        c.on_message(0, 2, "x", here(3), &s, &tl);
        c.on_message(1, 3, "y", here(4), &s, &tl);
        assert_eq!(c.slot("b"), Some(1));
        assert_eq!(c.last_seq(1), 3);
        let f = c.into_findings();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].topic, "b");
    }
}
