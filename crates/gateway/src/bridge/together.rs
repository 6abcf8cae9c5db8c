//! Records ingested together: a reader's synchronous pass over a batch of records fans each
//! topic out once ([`Together`]).

use std::sync::Arc;

thread_local! {
    /// The topics records were delivered to inside a [`Together`], whose fan-out waits for
    /// its end; `None` outside one.
    static UNSENT: std::cell::RefCell<Option<herald_core::Unsent>> =
        const { std::cell::RefCell::new(None) };
}

/// Most records a reader takes in one go from those it has received already (ingested
/// inside one [`Together`]).
pub(crate) const READY_RECORDS: usize = 256;

/// While held, records [`Ingest::deliver`](super::logs::Ingest::deliver)s on this thread
/// wait for the fan-out to the subscribers the publisher writes to itself ([`herald_core::direct`]) until it is dropped
/// (or a topic's fan-out queue is full, [`herald_core::Unsent`]): each then takes what a
/// reader's pass over a batch of records brought its topic in one write (one batch frame
/// when it asked for them) rather than a write per record. Not `Send`: it cannot be held
/// across an `await`, so it covers a synchronous loop only.
pub(crate) struct Together {
    outer: Option<herald_core::Unsent>,
    _here: std::marker::PhantomData<*const ()>,
}

impl Together {
    pub(crate) fn new() -> Self {
        Self {
            outer: UNSENT
                .with(|unsent| unsent.borrow_mut().replace(herald_core::Unsent::default())),
            _here: std::marker::PhantomData,
        }
    }

    /// Whether one is open on this thread.
    pub(super) fn open() -> bool {
        UNSENT.with(|unsent| unsent.borrow().is_some())
    }

    /// Counts a message delivered to `topic` without its fan-out.
    pub(super) fn add(topic: &Arc<herald_core::Topic>) {
        UNSENT.with(|unsent| {
            if let Some(unsent) = &mut *unsent.borrow_mut() {
                unsent.add(topic);
            }
        });
    }
}

impl Drop for Together {
    fn drop(&mut self) {
        // The inner list, dropped here: fanned out.
        let _ =
            UNSENT.with(|unsent| std::mem::replace(&mut *unsent.borrow_mut(), self.outer.take()));
    }
}
